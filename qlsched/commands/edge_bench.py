"""``qlsched bench --edge``: the Edge profile's figures beside the cluster's
(``qlsched.tools.edge_bench``). The cluster's come from ``--cluster-json FILE`` (a
``qlsched bench --json`` report), else from running that bench here; ``--no-cluster`` skips
them. Exit 0 when exactly once held, 1 when it did not or the bench could not run."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import msgspec

from qlsched.sqlite.errors import EdgeError
from qlsched.tools.edge_bench import (
    QUICK,
    ClusterFigures,
    EdgeBenchOptions,
    cluster_figures,
    render_edge,
    run_cluster_bench,
    run_edge_bench,
)


def main(args: argparse.Namespace) -> int:
    options = QUICK if args.quick else EdgeBenchOptions()

    def cluster() -> ClusterFigures | None:
        if args.no_cluster:
            return None
        if args.cluster_json:
            with open(args.cluster_json, encoding="utf-8") as fh:
                return cluster_figures(json.load(fh), args.cluster_json)
        return run_cluster_bench(args.quick)

    def progress(text: str) -> None:
        print(f"qlsched bench --edge: {text}", file=sys.stderr, flush=True)

    try:
        with tempfile.TemporaryDirectory(prefix="qlsched-edge-bench-") as workdir:
            report = run_edge_bench(Path(workdir), options, cluster=cluster, progress=progress)
    except (OSError, ValueError, RuntimeError, EdgeError) as exc:
        print(f"qlsched bench --edge: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(render_edge(report))
    return 0 if report.exactly_once else 1
