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


def test_a_parameter_read_twice_gets_a_value_not_a_fresh_draw_per_read() -> None:
    """Both ceiling scripts render; an expression that draws anew at each evaluation
    (``gen_random_uuid()``) pasted where a statement reads its ``$n`` twice is refused: the
    admit finds each new Run's row by its place in ``$14``, and a second draw found none
    (pgbench stopped on a NULL event id)."""
    import pytest

    from qlsched.tools import bench_data
    from qlsched.tools.bench.ceiling import BATCH_SCRIPT, SCRIPT

    for name in (SCRIPT, BATCH_SCRIPT):
        assert "INSERT INTO qlsched.runs" in bench_data.render_pgbench(
            bench_data.pgbench_template(name)
        )
    template = "-- @admit\n" + "\n".join(
        f"--   ${n} := {'ARRAY[pg_catalog.gen_random_uuid()]' if n == 14 else ':v'}"
        for n in range(1, 19)
    )
    with pytest.raises(ValueError, match=r"\$14 is read more than once"):
        bench_data.render_pgbench(template)
