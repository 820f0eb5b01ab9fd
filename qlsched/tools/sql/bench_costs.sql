-- The bench's cost phase (`qlsched bench`, qlsched.tools.bench.costs): a synthetic history
-- of terminal Runs and Attempts for startup recovery to ignore, written set-based as the
-- superuser on the bench's own database, inside a transaction that ran bench_fast_load.

-- name: bench_history_runs
-- $1 succeeded Runs of trigger 'history', one a second up to $3 ms, then $2 live Runs at $3
-- (even ones queued, odd ones dispatching); ids 00000000-0000-4000-8000-<ordinal as hex>:
-- every key ascends with the ordinal, so each index grows at its right edge (a 10M-row
-- history loads in minutes, not hours).
INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                          task_revision, execution_revision_id, scheduled_for_ms,
                          idempotency_key, state, owner, queued_at_ms, cancel_requested,
                          created_at_ms, admitted_by_owner, admitted_claim_token,
                          admitted_claim_version)
SELECT ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       'bench', 'history', 1, 'bench', 1, '00000000-0000-4000-8000-000000000000'::uuid, at,
       'bench:history:' || pg_catalog.lpad(i::text, 10, '0'),
       CASE WHEN i <= $1 THEN 'succeeded' WHEN (i - $1) % 2 = 0 THEN 'queued'
            ELSE 'dispatching' END,
       'runtime', at, false, at, 'bench-history', '00000000-0000-4000-8000-000000000000'::uuid, 1
  FROM pg_catalog.generate_series(1, $1::bigint + $2::bigint) AS i,
       LATERAL (SELECT $3::bigint - GREATEST($1::bigint - i, 0) * 1000 AS at) AS t;

-- name: bench_history_attempts
-- One Attempt per Run of bench_history_runs (same parameters), ids
-- 00000000-0000-4000-9000-<ordinal as hex>: the history's terminal (states cycle succeeded,
-- failed, lost); the live ones pristine (claimed: recovery leaves them) or `dispatching`
-- (candidates).
INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                              created_at_ms)
SELECT ('00000000-0000-4000-9000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       1, 'remote_worker',
       CASE WHEN i <= $1 THEN (ARRAY['succeeded', 'failed', 'lost'])[1 + i % 3]
            WHEN (i - $1) % 2 = 0 THEN 'claimed' ELSE 'dispatching' END,
       $3::bigint - GREATEST($1::bigint - i, 0) * 1000
  FROM pg_catalog.generate_series(1, $1::bigint + $2::bigint) AS i;

-- name: bench_analyze_history
-- Fresh statistics after the load, as autovacuum would give a long-lived history.
ANALYZE qlsched.runs, qlsched.attempts;
