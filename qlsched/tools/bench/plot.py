"""``qlsched bench --plot DIR``: the bench's figures as charts (PNG), with matplotlib.

Four charts, from a run just made or from a saved ``--json`` report (``--from-json``):

* ``drain_progress.png``: the share of each drain's rows admitted over time, per phase;
* ``lag_distribution.png``: how schedule lag is spread (the 100,000-trigger steady load's
  histogram with ``--scale``; the percentiles of the other phases);
* ``claim_latency.png``: the claim's p50 and p99 against the schedule table's size, per
  state;
* ``rss.png``: a replica's RSS against the triggers it works over, and each replica's RSS
  as the million-trigger burst is admitted.

matplotlib is the optional ``bench`` extra (``pip install 'qlsched[bench]'``); without it
``--plot`` says so in one line and exits 2. A chart whose figures the report lacks (an
older report, a phase not run) is drawn with what there is, never skipped silently: its
title says what is missing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import msgspec

from qlsched.tools.bench.scale_results import LagHistogram, Progress, RssSample

INSTALL = "--plot needs matplotlib: pip install 'qlsched[bench]'"
CHARTS = ("drain_progress.png", "lag_distribution.png", "claim_latency.png", "rss.png")


class _Drain(msgspec.Struct, frozen=True):
    triggers: int = 0
    progress: Progress | None = None


class _Lag(msgspec.Struct, frozen=True):
    p50: int | None = None
    p95: int | None = None
    p99: int | None = None
    max: int | None = None


class _Steady(msgspec.Struct, frozen=True):
    triggers: int = 0
    lag_ms: _Lag | None = None


class _Claim(msgspec.Struct, frozen=True):
    p50: float = 0.0
    p99: float = 0.0


class _Rss(msgspec.Struct, frozen=True):
    triggers: int
    rss_mb: float


class _BigBurst(msgspec.Struct, frozen=True):
    triggers: int = 0
    progress: Progress | None = None
    rss_samples: list[RssSample] = msgspec.field(default_factory=list)


class _BigSteady(msgspec.Struct, frozen=True):
    triggers: int = 0
    histogram: LagHistogram | None = None


class _Scale(msgspec.Struct, frozen=True):
    burst: _BigBurst | None = None
    steady: _BigSteady | None = None


class ChartInput(msgspec.Struct, frozen=True):
    """The parts of a bench report the charts draw; every one optional."""

    drain: _Drain | None = None
    drain_same_tick: _Drain | None = None
    steady: _Steady | None = None
    claim_latency_us: dict[int, dict[str, _Claim]] = msgspec.field(default_factory=dict)
    rss: list[_Rss] = msgspec.field(default_factory=list)
    scale: _Scale | None = None


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def write_charts(report: Any, directory: Path) -> list[Path]:
    """The charts of a ``BenchReport`` just made; their paths are printed on stderr."""
    data = msgspec.convert(msgspec.to_builtins(report), ChartInput, strict=False)
    paths = draw(data, directory)
    for path in paths:
        print(f"qlsched bench: chart {path}", file=sys.stderr)
    return paths


def draw(data: ChartInput, directory: Path) -> list[Path]:
    """Write the four charts into ``directory`` (created if missing)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, whatever the environment says
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    drawers = (_progress, _lag, _claims, _rss)
    paths: list[Path] = []
    for name, drawer in zip(CHARTS, drawers, strict=True):
        figure, axes = plt.subplots(figsize=(8, 5))
        drawer(axes, data)
        figure.tight_layout()
        path = directory / name
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths


def _progress(axes: Any, data: ChartInput) -> None:
    phases: list[tuple[str, int, Progress | None]] = []
    if data.drain is not None:
        phases.append(("burst", data.drain.triggers, data.drain.progress))
    if data.drain_same_tick is not None:
        phases.append(
            ("same cron tick", data.drain_same_tick.triggers, data.drain_same_tick.progress)
        )
    if data.scale is not None and data.scale.burst is not None:
        phases.append(("hundredfold burst", data.scale.burst.triggers, data.scale.burst.progress))
    drawn = 0
    for label, triggers, progress in phases:
        if progress is None or not progress.seconds or not triggers:
            continue
        share = [a / triggers for a in progress.admitted]
        axes.plot(progress.seconds, share, label=f"{label} ({triggers:,} triggers)")
        drawn += 1
    axes.set_xlim(left=-0.25)  # the same-tick drain is polled before its tick
    axes.set_xlabel("seconds since the rows fell due")
    axes.set_ylabel("share of the rows admitted")
    axes.set_title("Drain progress" + ("" if drawn else " (no progress in this report)"))
    if drawn:
        axes.legend()
    axes.grid(alpha=0.3)


def _lag(axes: Any, data: ChartInput) -> None:
    big = data.scale.steady if data.scale is not None else None
    if big is not None and big.histogram is not None and any(big.histogram.counts):
        h = big.histogram
        labels = [f"{lo}-{hi}" for lo, hi in zip(h.edges_ms, h.edges_ms[1:], strict=False)] + [
            f">={h.edges_ms[-1]}"
        ]
        axes.bar(range(len(h.counts)), h.counts)
        axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        axes.set_xlabel("schedule lag, ms")
        axes.set_ylabel("Runs")
        axes.set_title(f"Schedule lag, steady load of {big.triggers:,} triggers")
        return
    lag = data.steady.lag_ms if data.steady is not None else None
    names = ("p50", "p95", "p99", "max")
    values = [getattr(lag, n) if lag is not None else None for n in names]
    axes.bar(names, [v or 0 for v in values])
    axes.set_ylabel("schedule lag, ms")
    triggers = data.steady.triggers if data.steady is not None else 0
    axes.set_title(
        f"Schedule lag, steady load of {triggers:,} triggers (percentiles; "
        "the histogram needs --scale)"
    )


def _claims(axes: Any, data: ChartInput) -> None:
    sizes = sorted(data.claim_latency_us)
    states = sorted({s for size in sizes for s in data.claim_latency_us[size]})
    for state in states:
        xs = [size for size in sizes if state in data.claim_latency_us[size]]
        (line,) = axes.plot(
            xs, [data.claim_latency_us[x][state].p99 for x in xs], marker="o", label=f"{state} p99"
        )
        axes.plot(
            xs,
            [data.claim_latency_us[x][state].p50 for x in xs],
            marker=".",
            linestyle="--",
            color=line.get_color(),
            label=f"{state} p50",
        )
    if sizes:
        axes.set_xscale("log")
        axes.legend(fontsize="small")
    axes.set_xlabel("schedule rows")
    axes.set_ylabel("claim latency, us")
    axes.set_title("Claim latency against table size" + ("" if sizes else " (no claim figures)"))
    axes.grid(alpha=0.3)


def _rss(axes: Any, data: ChartInput) -> None:
    if data.rss:
        points = sorted((r.triggers, r.rss_mb) for r in data.rss)
        axes.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            label="one replica after its rounds over the table",
        )
    samples = data.scale.burst.rss_samples if data.scale and data.scale.burst else []
    if samples:
        replicas = len(samples[0].rss_mb)
        for i in range(replicas):
            points = [(s.admitted or 1, s.rss_mb[i]) for s in samples if i < len(s.rss_mb)]
            axes.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                linestyle="--",
                label=f"replica {i + 1} during the hundredfold burst (x = admitted)",
            )
    if data.rss or samples:
        axes.set_xscale("log")
        axes.legend(fontsize="small")
    axes.set_ylim(bottom=0)
    axes.set_xlabel("triggers")
    axes.set_ylabel("RSS, MB")
    axes.set_title("Replica RSS against trigger count" + ("" if data.rss else " (no RSS figures)"))
    axes.grid(alpha=0.3)
