-- name: runs_count
SELECT count(*) FROM runs;

-- name: runs_recent
-- The newest Runs for status. ?1 limit.
SELECT project_id, trigger_id, scheduled_for_ms, state, queued_at_ms, admitted_by_owner
  FROM runs ORDER BY created_at_ms DESC, scheduled_for_ms DESC LIMIT ?1;
