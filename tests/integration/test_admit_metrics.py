"""The store's admit counts on ``/metrics`` (real PostgreSQL): admit statements sent and the
serialization retries among them, read from the store at each scrape, so their ratio is the
replica's SERIALIZABLE retry rate (docs/contract.md §5 "Admit")."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.root import open_cluster_control
from qlsched.core.outcomes import Outcome, RevisionChanged
from qlsched.postgres.publish import publish
from tests.integration.adapter_support import (
    LEASE_MS,
    Counts,
    Env,
    fire_for,
    one_project,
)
from tests.integration.cluster_support import (
    control_config,
    http_get,
    open_superuser,
    publish_triggers,
    trigger,
    wait_until,
)
from tests.support.pg import TestDatabase

STATEMENTS = "qlsched_admit_statements_total"
RETRIES = "qlsched_admit_serialization_retries_total"


def samples_of(text: bytes) -> dict[str, float]:
    """Samples of a Prometheus text exposition with no label but the profile, by name."""
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if s.labels == {"profile": "cluster"}
    }


async def test_replica_exposes_its_admit_statements_on_metrics(pg_db: TestDatabase) -> None:
    """A replica that admitted occurrences shows the admit statements its store sent, and
    the serialization retries among them, on its ``/metrics`` endpoint: the very counts of
    its store (cumulative counters)."""
    ids = ["t0", "t1"]
    await publish_triggers(pg_db, [trigger(i) for i in ids])
    config = control_config(pg_db.runtime_dsn, "r", http="127.0.0.1:0")
    async with open_superuser(pg_db) as su, open_cluster_control(config) as control:
        assert control.http_address is not None
        await su.wait_initialised(ids)
        scheduled_for = await su.make_due(ids)

        async def admitted() -> bool:
            rows = await su.schedules()
            return all(rows[i]["last_scheduled_at_ms"] == scheduled_for for i in ids)

        await wait_until(admitted, what="both occurrences admitted")
        # Nothing else is due: no admit runs between these reads and the scrape.
        statements, retries = control.store.admit_statements, control.store.ssi_retries
        response = await http_get(control.http_address[1], "/metrics")

    assert response.status == 200
    samples = samples_of(response.body)
    assert statements >= 1
    assert samples[STATEMENTS] == statements
    assert samples[RETRIES] == retries
    assert samples[RETRIES] <= samples[STATEMENTS]


async def test_a_serialization_retry_is_counted_and_exposed(env: Env) -> None:
    """A real serialization failure (SQLSTATE 40001) is counted once and shows on the
    metrics: an admit waits for its schedule row, which an admin transaction re-publishing
    the trigger holds; the publish commits, the admit's lock meets the concurrent update,
    is retried and then refused by the new revision."""
    await env.publish(one_project(1))
    await env.make_due()
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    metrics = Metrics(admit_counts=env.store)
    before = samples_of(metrics.render())
    admin = await env.connect(env.db.admin_dsn)
    tx = admin.conn.transaction()
    await admin.call(tx.start)
    await admin.call(publish, admin.conn, one_project(1, cron="*/5 * * * *"))
    outcomes: list[Outcome] = []

    async def admit() -> None:
        outcomes.extend(await env.store.admit([fire_for(claim)]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(admit)
        await env.wait_lock_waiters(1)
        await admin.call(tx.commit)

    assert outcomes == [RevisionChanged("p", "t0000", part="trigger")]
    assert await env.counts() == Counts(runs=0, attempts=0, events=0)
    after = samples_of(metrics.render())
    assert (before[STATEMENTS], before[RETRIES]) == (0, 0)
    assert after[RETRIES] == env.store.ssi_retries == 1
    assert after[STATEMENTS] == env.store.admit_statements
    # The statement that waited for the row and failed, and its retry.
    assert after[STATEMENTS] == 2
