-- name: retention_prune
-- One prune batch of at most $1 Runs (runtime, autocommit, READ COMMITTED): the function
-- qlsched.prune_finished_runs (0015_retention.sql) says what it deletes and why it is a
-- function. One row: the rows deleted, and the horizon (NULL: retention is off).
SELECT p.runs, p.attempts, p.events, p.marks, p.horizon_ms
  FROM qlsched.prune_finished_runs($1::integer) AS p;

-- name: retention_setting
-- The retention (any role: all read it), the horizon it puts now by the database's clock
-- (NULL when off), and who set it when.
SELECT r.retention_ms, r.updated_by, r.updated_at_ms,
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
       - r.retention_ms AS horizon_ms
  FROM qlsched.retention AS r;

-- name: retention_set
-- Set the retention ($1 ms, NULL: off) as the admin, recording who (the session's login
-- role; $2, the operator's own name, when given) and when (the database's clock).
UPDATE qlsched.retention
   SET retention_ms = $1::bigint,
       updated_by = COALESCE($2::text, SESSION_USER::text),
       updated_at_ms = (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
 WHERE id
RETURNING retention_ms, updated_by, updated_at_ms;

-- name: retention_totals
-- Everything retention deleted, database-wide (one row per trigger revision it ever
-- pruned: small, whatever the history's size).
SELECT COALESCE(pg_catalog.sum(p.runs), 0)::bigint AS runs,
       COALESCE(pg_catalog.sum(p.attempts), 0)::bigint AS attempts,
       COALESCE(pg_catalog.sum(p.events), 0)::bigint AS events,
       COALESCE(pg_catalog.sum(p.marks), 0)::bigint AS marks
  FROM qlsched.retention_pruned AS p;

-- name: retention_backfill_limit
-- Where a backfill of trigger ($1, $2) may start at the earliest, by the database's
-- clock: after the horizon (NULL when retention is off) and after the latest occurrence
-- retention already deleted for it (NULL: none).
SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
       - r.retention_ms AS horizon_ms,
       r.retention_ms,
       (SELECT pg_catalog.max(p.through_ms) FROM qlsched.retention_pruned AS p
         WHERE p.project_id = $1 AND p.trigger_id = $2) AS through_ms
  FROM qlsched.retention AS r;
