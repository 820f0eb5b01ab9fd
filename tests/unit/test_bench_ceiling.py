"""pgbench runs the pair with the settings the replicas' pools run with."""

from __future__ import annotations

import shlex

from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS
from qlsched.tools.bench.ceiling import pool_options


def test_pgbench_gets_every_setting_of_both_pools() -> None:
    words = shlex.split(pool_options())
    assert words[::2] == ["-c"] * (len(words) // 2)
    given = dict(w.split("=", 1) for w in words[1::2])
    assert given == {**CLAIM_SETTINGS, **ADMIT_SETTINGS}


def test_the_batch_script_is_the_products_claim_and_admit_ending_in_arrays() -> None:
    """The batch ceiling's pgbench script holds the product's claim statement (its CTEs, its
    UPDATE) with only its final SELECT replaced by the arrays block, then the product's
    admit: every variable it reads is one the script defines or the arrays block sets."""
    from qlsched.postgres.queries import query
    from qlsched.tools import bench_data
    from qlsched.tools.bench.ceiling import BATCH_COLUMNS, BATCH_SCRIPT

    script = bench_data.render_pgbench(bench_data.pgbench_template(BATCH_SCRIPT))
    assert bench_data.pgbench_variables(script) <= BATCH_COLUMNS | {"owner", "lease_ms", "k"}
    assert "UPDATE qlsched.trigger_schedules AS s" in script
    assert "AS project_ids" in script
    assert "FROM claimed AS c" not in script
    assert "INSERT INTO qlsched.runs" in script
    claim = query("claim")
    cut = bench_data.with_ending(claim, "SELECT 1;")
    assert cut.endswith("SELECT 1;")
    assert cut[: -len("SELECT 1;")] == claim[: claim.rindex("\nSELECT ") + 1]
