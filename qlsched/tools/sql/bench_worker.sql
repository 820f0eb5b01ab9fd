-- The bench's worker phase (`qlsched bench`, qlsched.tools.bench.worker): queued Runs for
-- the worker to run, written set-based as admission would (Run, pristine Attempt, events).

-- name: bench_worker_runs
-- $1 queued Runs of trigger $2 (its current revision and execution revision), one a
-- millisecond before $3, each with a pristine Attempt and the events run.created and
-- run.queued.
WITH t AS (
    SELECT tr.project_id, tr.trigger_id, tr.revision, tr.task_id, tr.task_revision,
           tr.execution_revision_id
      FROM qlsched.triggers AS tr
     WHERE tr.trigger_id = $2
),
r AS (
    INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                              task_revision, execution_revision_id, scheduled_for_ms,
                              idempotency_key, state, owner, queued_at_ms, cancel_requested,
                              created_at_ms, admitted_by_owner, admitted_claim_token,
                              admitted_claim_version)
    SELECT pg_catalog.gen_random_uuid(), t.project_id, t.trigger_id, t.revision, t.task_id,
           t.task_revision, t.execution_revision_id, $3::bigint - i,
           'bench:worker:' || pg_catalog.lpad(i::text, 10, '0'), 'queued', 'runtime',
           $3::bigint - i, false, $3::bigint - i, 'bench-worker',
           pg_catalog.gen_random_uuid(), 1
      FROM t, pg_catalog.generate_series(1, $1::integer) AS i
 RETURNING run_id, created_at_ms
),
a AS (
    INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                  created_at_ms)
    SELECT pg_catalog.gen_random_uuid(), r.run_id, 1, 'remote_worker', 'claimed',
           r.created_at_ms
      FROM r
)
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT pg_catalog.gen_random_uuid(), r.run_id, e.seq, e.type, r.created_at_ms, 'bench'
  FROM r CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS e(seq, type);

-- name: bench_worker_done
-- How many Runs ended succeeded, and how many ended otherwise.
SELECT pg_catalog.count(*) FILTER (WHERE state = 'succeeded')::int AS succeeded,
       pg_catalog.count(*) FILTER (WHERE state IN ('failed', 'cancelled'))::int AS other
  FROM qlsched.runs;
