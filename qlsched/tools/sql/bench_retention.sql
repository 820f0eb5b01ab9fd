-- The bench's retention phase (`qlsched bench`, qlsched.tools.bench.retention): a history
-- of finished Runs past the horizon, each with an Attempt and two events, written
-- set-based as the superuser on the bench's own database, inside a transaction that ran
-- bench_fast_load; then the prune batches are timed as a replica sends them.

-- name: bench_retention_runs
-- $1 finished Runs of trigger 'history' that ended one a millisecond apart, the last at
-- $3 - 2 days (past a day's horizon), states cycling succeeded, failed, cancelled; then $2
-- queued Runs (never deleted). Ids 00000000-0000-4000-8000-<ordinal as hex>: every key,
-- finished_at_ms included, ascends with the ordinal, so each index grows at its right edge.
INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                          task_revision, execution_revision_id, scheduled_for_ms,
                          idempotency_key, state, owner, queued_at_ms, cancel_requested,
                          created_at_ms, admitted_by_owner, admitted_claim_token,
                          admitted_claim_version, started_at_ms, finished_at_ms)
SELECT ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       'bench', 'history', 1, 'bench', 1, '00000000-0000-4000-8000-000000000000'::uuid, at,
       'bench:retention:' || pg_catalog.lpad(i::text, 10, '0'),
       CASE WHEN i > $1 THEN 'queued'
            ELSE (ARRAY['succeeded', 'failed', 'cancelled'])[1 + i % 3] END,
       'runtime', at, false, at, 'bench-history', '00000000-0000-4000-8000-000000000000'::uuid, 1,
       CASE WHEN i > $1 THEN NULL ELSE at END, CASE WHEN i > $1 THEN NULL ELSE at END
  FROM pg_catalog.generate_series(1, $1::bigint + $2::bigint) AS i,
       LATERAL (SELECT $3::bigint - 172800000 - ($1::bigint - i) AS at) AS t;

-- name: bench_retention_attempts
-- One Attempt per Run of bench_retention_runs (same parameters), ids
-- 00000000-0000-4000-9000-<ordinal as hex>: a finished Run's in its state, a queued one's
-- pristine.
INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                              created_at_ms, finished_at_ms)
SELECT ('00000000-0000-4000-9000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       1, 'remote_worker',
       CASE WHEN i > $1 THEN 'claimed'
            ELSE (ARRAY['succeeded', 'failed', 'cancelled'])[1 + i % 3] END,
       at, CASE WHEN i > $1 THEN NULL ELSE at END
  FROM pg_catalog.generate_series(1, $1::bigint + $2::bigint) AS i,
       LATERAL (SELECT $3::bigint - 172800000 - ($1::bigint - i) AS at) AS t;

-- name: bench_retention_events
-- Two events per Run of bench_retention_runs (same parameters): created, and its end
-- (queued for a queued one), ids 00000000-0000-4000-a00<seq>-<ordinal as hex>.
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT ('00000000-0000-4000-a00' || s::text || '-'
        || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       ('00000000-0000-4000-8000-' || pg_catalog.lpad(pg_catalog.to_hex(i), 12, '0'))::uuid,
       s,
       CASE WHEN s = 1 THEN 'run.created' WHEN i > $1 THEN 'run.queued'
            ELSE 'run.' || (ARRAY['succeeded', 'failed', 'cancelled'])[1 + i % 3] END,
       $3::bigint - 172800000 - ($1::bigint - i), 'bench'
  FROM pg_catalog.generate_series(1, $1::bigint + $2::bigint) AS i,
       pg_catalog.generate_series(1, 2) AS s;

-- name: bench_retention_prepare
-- Fresh statistics after the load (as autovacuum would give a long-lived history), and a
-- retention of a day: every finished Run of the history lies past its horizon.
ANALYZE qlsched.runs, qlsched.attempts, qlsched.run_events, qlsched.recovery_marks;
UPDATE qlsched.retention SET retention_ms = 86400000;

-- name: bench_retention_clear
-- Retention off and its totals emptied (the other phases' tables are bench_reset's).
UPDATE qlsched.retention SET retention_ms = NULL, updated_by = NULL, updated_at_ms = NULL;
TRUNCATE qlsched.retention_pruned;

-- name: bench_retention_left
-- What is left: finished and unfinished Runs, Attempts, events.
SELECT pg_catalog.count(*) FILTER (WHERE r.state <> 'queued') AS finished,
       pg_catalog.count(*) FILTER (WHERE r.state = 'queued') AS queued,
       (SELECT pg_catalog.count(*) FROM qlsched.attempts) AS attempts,
       (SELECT pg_catalog.count(*) FROM qlsched.run_events) AS events
  FROM qlsched.runs AS r;
