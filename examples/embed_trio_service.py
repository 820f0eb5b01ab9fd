"""Embedding qlsched in a Trio service: cluster control runs beside the service's own tasks.

    QLSCHED_DSN=postgresql://qlsched_runtime@/qlsched?host=/run/postgresql \\
        python examples/embed_trio_service.py
    python examples/embed_trio_service.py RUNTIME_DSN

Every replica option also reads from ``QLSCHED_*`` environment variables (``QLSCHED_OWNER``,
``QLSCHED_LEASE_MS``, ``QLSCHED_HTTP``, ...); the DSN must be the runtime role's. Run the
file several times, on one machine or many: the copies are replicas of one cluster, and
each occurrence still becomes exactly one Run.

Ctrl-C or SIGTERM stops the service in order: its own tasks are cancelled first, then
leaving ``open_cluster_control`` withdraws HTTP admission, lets the round in flight finish
(releasing the claims it has not decided) within ``stop_timeout_ms``, and closes the pools.

The same with a task of its own instead of a block::

    control = await nursery.start(qlsched.serve, config)
    ...
    control.request_stop()  # graceful; cancelling the nursery instead stops at once
"""

from __future__ import annotations

import os
import signal
import sys

import trio

import qlsched


async def report_progress(control: qlsched.ClusterControl, every_s: float = 2.0) -> None:
    """The service's own work; here, a line every few seconds about the replica beside it."""
    while True:
        await trio.sleep(every_s)
        stats = control.statistics()
        last = stats.lifecycle.last_round
        latest = (
            "" if last is None else f"; last round claimed {last.claimed}, admitted {last.admitted}"
        )
        print(
            f"service: replica {stats.owner}: {stats.lifecycle.rounds} rounds, "
            f"ready={stats.lifecycle.ready}{latest}",
            flush=True,
        )


async def main(dsn: str | None) -> int:
    # Defaults < a config file (QLSCHED_CONFIG) < QLSCHED_* variables < these flags.
    flags = {"dsn": dsn} if dsn else {}
    config = qlsched.load_config(file=os.environ.get("QLSCHED_CONFIG"), flags=flags)
    if not config.dsn:
        print("usage: embed_trio_service.py RUNTIME_DSN (or set QLSCHED_DSN)", file=sys.stderr)
        return 2
    # Open the signal receiver first: a signal that arrives while the replica starts is
    # then queued here rather than killing the process half-started.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with qlsched.open_cluster_control(config) as control:
            print(f"service: started with replica {config.owner}", flush=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(report_progress, control)
                async for signum in signals:
                    print(f"service: {signal.Signals(signum).name}: stopping", flush=True)
                    break
                nursery.cancel_scope.cancel()  # the service's own tasks end first
            # Leaving the block stops the replica in order (admission, drain, pools).
        stats = control.statistics()
    print(f"service: stopped after {stats.lifecycle.rounds} rounds", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(trio.run(main, sys.argv[1] if len(sys.argv) > 1 else None))
    except (qlsched.ConfigError, qlsched.DatabaseUnavailable, qlsched.SchemaNotReady) as exc:
        print(f"embed_trio_service: {exc}", file=sys.stderr)
        sys.exit(1)
