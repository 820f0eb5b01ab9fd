-- name: recent_runs
-- The most recent Runs for `status`: $1 = how many.
SELECT r.project_id, r.trigger_id, r.scheduled_for_ms, r.queued_at_ms, r.state,
       r.admitted_by_owner
  FROM qlsched.runs AS r
 ORDER BY r.created_at_ms DESC
 LIMIT $1;
