-- name: runs_recent
-- The latest Runs (newest first) with their Attempts, as the observer: of project $1 and
-- trigger $2 and in state $3 when not NULL, at most $4. No output tail (not the observer's).
SELECT r.run_id::text, r.project_id, r.trigger_id, r.task_id, r.state, r.scheduled_for_ms,
       r.idempotency_key, r.queued_at_ms, r.started_at_ms, r.finished_at_ms,
       r.cancel_requested,
       (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
                   'attempt_no', a.attempt_no, 'state', a.state, 'worker_id', a.worker_id,
                   'started_at_ms', a.started_at_ms, 'finished_at_ms', a.finished_at_ms,
                   'exit_code', a.exit_code, 'result', a.result, 'error', a.error)
               ORDER BY a.attempt_no)
          FROM qlsched.attempts AS a WHERE a.run_id = r.run_id)::text AS attempts
  FROM qlsched.runs AS r
 WHERE ($1::text IS NULL OR r.project_id = $1)
   AND ($2::text IS NULL OR r.trigger_id = $2)
   AND ($3::text IS NULL OR r.state = $3)
 ORDER BY r.created_at_ms DESC, r.run_id DESC
 LIMIT $4;

-- name: last_outcomes
-- Per trigger (arrays $1 projects, $2 triggers) its latest finished Run: state, duration
-- (first claim to end), end. Each walks runs_trigger_idx backwards from its newest Run.
SELECT k.project_id, k.trigger_id, o.state, o.duration_ms, o.finished_at_ms
  FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]))
           AS k(project_id, trigger_id)
 CROSS JOIN LATERAL (
        SELECT r.state, r.finished_at_ms - r.started_at_ms AS duration_ms, r.finished_at_ms
          FROM qlsched.runs AS r
         WHERE r.project_id = k.project_id AND r.trigger_id = k.trigger_id
           AND r.state IN ('succeeded', 'failed', 'cancelled')
         ORDER BY r.scheduled_for_ms DESC
         LIMIT 1
       ) AS o;

-- name: run_state_counts
-- Runs running now and failed Runs, each counted up to $1 (a bound: status never walks
-- the whole history).
SELECT (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM qlsched.runs AS r
          WHERE r.state = 'running' LIMIT $1) AS x)::int AS running,
       (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM qlsched.runs AS r
          WHERE r.state = 'failed' LIMIT $1) AS y)::int AS failed;
