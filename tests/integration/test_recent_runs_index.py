"""``status``'s recent Runs read an index, not the whole history (issue #20, item 7).

The query orders every Run by ``created_at_ms`` and keeps the newest few; with a large
history its plan must walk ``runs_created_idx`` backwards and stop, never sort the table.
"""

from __future__ import annotations

from qlsched.postgres.queries import query
from tests.integration.adapter_support import Env

HISTORY = 20_000


async def test_recent_runs_walk_the_created_index_backwards(env: Env) -> None:
    """With 20,000 Runs in the history, the recent-runs query is a backward scan of
    runs_created_idx under a LIMIT (no Sort node), and returns the newest Runs first."""
    await env.su(
        "INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,"
        " task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state,"
        " owner, queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,"
        " admitted_claim_version)"
        " SELECT gen_random_uuid(), 'p', 't', 1, 'k', 1, gen_random_uuid(), i * 1000,"
        " 'key' || i, 'succeeded', 'runtime', i * 1000, i * 1000, 'r', gen_random_uuid(), 1"
        " FROM generate_series(1, $1::int) AS i",
        HISTORY,
    )
    await env.su("ANALYZE qlsched.runs")
    sql = query("recent_runs")
    [[plan]] = await env.su("EXPLAIN (FORMAT JSON) " + sql.replace("$1", "10"))
    text = str(plan)
    assert "runs_created_idx" in text, text
    assert "Backward" in text, text
    assert "'Sort'" not in text, text
    rows = await env.su(sql, 3)
    assert [r["scheduled_for_ms"] for r in rows] == [
        HISTORY * 1000,
        (HISTORY - 1) * 1000,
        (HISTORY - 2) * 1000,
    ]
