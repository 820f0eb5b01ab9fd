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
