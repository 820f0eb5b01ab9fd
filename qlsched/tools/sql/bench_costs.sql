-- The bench's cost phase (`qlsched bench`, qlsched.tools.bench.costs): a synthetic history
-- of terminal Runs and Attempts for startup recovery to ignore, written set-based as the
-- superuser on the bench's own database, inside a transaction that ran bench_fast_load.

-- name: bench_history_runs
-- $1 succeeded Runs of trigger 'history', ids 00000000-0000-4000-8000-<ordinal as hex>, one a
-- second up to $2 ms: every key ascends with the ordinal, so each index grows at its right
-- edge (a 10M-row history loads in minutes, not hours).
INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                          task_revision, execution_revision_id, scheduled_for_ms,
                          idempotency_key, state, owner, queued_at_ms, cancel_requested,
                          created_at_ms, admitted_by_owner, admitted_claim_token,
                          admitted_claim_version)
SELECT ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       'bench', 'history', 1, 'bench', 1, '00000000-0000-4000-8000-000000000000'::uuid,
       $2::bigint - ($1::bigint - i) * 1000,
       'bench:history:' || pg_catalog.lpad(i::text, 10, '0'), 'succeeded', 'runtime',
       $2::bigint - ($1::bigint - i) * 1000, false, $2::bigint - ($1::bigint - i) * 1000,
       'bench-history',
       '00000000-0000-4000-8000-000000000000'::uuid, 1
  FROM pg_catalog.generate_series(1, $1::bigint) AS i;

-- name: bench_history_attempts
-- One terminal Attempt per history Run (states cycle succeeded, failed, lost), ids
-- 00000000-0000-4000-9000-<ordinal as hex>.
INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                              created_at_ms)
SELECT ('00000000-0000-4000-9000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       1, 'remote_worker', (ARRAY['succeeded', 'failed', 'lost'])[1 + i % 3],
       $2::bigint - ($1::bigint - i) * 1000
  FROM pg_catalog.generate_series(1, $1::bigint) AS i;

-- name: bench_live_work
-- $1 live Runs after the history (ordinals $2+1 ..), each with one Attempt: even ones
-- pristine (queued, claimed: recovery leaves them), odd ones `dispatching` (candidates).
WITH live AS (
    SELECT $2::bigint + i AS n, i % 2 = 0 AS pristine
      FROM pg_catalog.generate_series(1, $1::bigint) AS i
), runs AS (
    INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                              task_revision, execution_revision_id, scheduled_for_ms,
                              idempotency_key, state, owner, queued_at_ms, cancel_requested,
                              created_at_ms, admitted_by_owner, admitted_claim_token,
                              admitted_claim_version)
    SELECT ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(n), 12, '0'))::uuid,
           'bench', 'history', 1, 'bench', 1, '00000000-0000-4000-8000-000000000000'::uuid,
           $3::bigint, 'bench:history:' || pg_catalog.lpad(n::text, 10, '0'),
           CASE WHEN pristine THEN 'queued' ELSE 'dispatching' END, 'runtime', $3::bigint,
           false, $3::bigint, 'bench-history', '00000000-0000-4000-8000-000000000000'::uuid, 1
      FROM live
)
INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                              created_at_ms)
SELECT ('00000000-0000-4000-9000-' || pg_catalog.lpad(pg_catalog.to_hex(n), 12, '0'))::uuid,
       ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(n), 12, '0'))::uuid,
       1, 'remote_worker', CASE WHEN pristine THEN 'claimed' ELSE 'dispatching' END, $3::bigint
  FROM live;

-- name: bench_analyze_history
-- Fresh statistics after the load, as autovacuum would give a long-lived history.
ANALYZE qlsched.runs, qlsched.attempts;
