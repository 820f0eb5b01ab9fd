-- Cancel a Run (docs/contract.md §13), as the admin role, in one transaction that first
-- locks the Run (so its event numbers are the Run's last plus one) and ends with the audit
-- row (control_record_action).

-- name: cancel_lock_run
-- Lock Run $1 and read what cancel decides on (no row: no such Run).
SELECT r.run_id::text, r.project_id, r.trigger_id, r.trigger_revision, r.state,
       r.cancel_requested
  FROM qlsched.runs AS r
 WHERE r.run_id = $1::uuid
   FOR UPDATE;

-- name: cancel_queued
-- A queued or held Run (locked): cancelled at once with its pristine Attempt, and its
-- run.cancelled event by actor $2, in database time.
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
),
run AS (
    UPDATE qlsched.runs AS r
       SET state = 'cancelled', cancel_requested = true, finished_at_ms = c.now_ms
      FROM clock AS c
     WHERE r.run_id = $1::uuid AND r.state IN ('queued', 'held')
 RETURNING r.run_id, c.now_ms
),
attempt AS (
    UPDATE qlsched.attempts AS a
       SET state = 'cancelled', result = 'cancelled', finished_at_ms = run.now_ms
      FROM run
     WHERE a.run_id = run.run_id AND a.state = 'claimed'
)
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT pg_catalog.gen_random_uuid(), run.run_id,
       (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
         WHERE e.run_id = run.run_id) + 1,
       'run.cancelled', run.now_ms, $2
  FROM run;

-- name: cancel_request_running
-- A running Run (locked): ask its worker to stop it (seen at its next heartbeat), with a
-- run.cancel_requested event by actor $2.
WITH run AS (
    UPDATE qlsched.runs AS r
       SET cancel_requested = true
     WHERE r.run_id = $1::uuid AND r.state = 'running' AND NOT r.cancel_requested
 RETURNING r.run_id
)
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT pg_catalog.gen_random_uuid(), run.run_id,
       (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
         WHERE e.run_id = run.run_id) + 1,
       'run.cancel_requested',
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint, $2
  FROM run;
