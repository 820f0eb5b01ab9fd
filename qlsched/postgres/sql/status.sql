-- name: status_now_ms
-- The database's clock for `status` (one observation; every lag and lease left uses it).
SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint;

-- name: status_schedules
-- Schedule rows with their trigger's cron, zone and DST policy, and the row's jitter and due
-- time, for `status`; $1 = row limit.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.cron, t.timezone,
       s.next_fire_at_ms, s.last_scheduled_at_ms, s.claim_owner, s.claim_expires_at_ms,
       s.skipped_total, s.coalesced_total, t.dst_gap, t.dst_fold, s.jitter_ms, s.due_at_ms,
       s.overlap_skipped_total, s.deadline_cancelled_total
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 ORDER BY s.project_id, s.trigger_id
 LIMIT $1;

-- name: status_schedules_after
-- The next page of `status --all` after key ($1 project, $2 trigger), $3 rows at most: the
-- page is cut from the primary key first, then each row finds its trigger by key, so a page
-- deep in the table costs what the first one does (as /v1/schedules' pages).
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.cron, t.timezone,
       s.next_fire_at_ms, s.last_scheduled_at_ms, s.claim_owner, s.claim_expires_at_ms,
       s.skipped_total, s.coalesced_total, t.dst_gap, t.dst_fold, s.jitter_ms, s.due_at_ms,
       s.overlap_skipped_total, s.deadline_cancelled_total
  FROM (SELECT *
          FROM qlsched.trigger_schedules AS p
         WHERE (p.project_id, p.trigger_id) > ($1::text, $2::text)
         ORDER BY p.project_id, p.trigger_id
         LIMIT $3) AS s
 CROSS JOIN LATERAL (SELECT tr.cron, tr.timezone, tr.dst_gap, tr.dst_fold
                       FROM qlsched.triggers AS tr
                      WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id
                      LIMIT 1) AS t
 ORDER BY s.project_id, s.trigger_id;

-- name: recent_runs
-- The most recent Runs for `status`: $1 = how many.
SELECT r.project_id, r.trigger_id, r.scheduled_for_ms, r.queued_at_ms, r.state,
       r.admitted_by_owner
  FROM qlsched.runs AS r
 ORDER BY r.created_at_ms DESC
 LIMIT $1;

-- name: status_failing
-- Schedule rows whose last admits failed (counted until the next admit), for `status`,
-- `check` and metrics: the failing index only, never the whole table. $1 = row limit.
SELECT s.project_id, s.trigger_id, s.failures, s.last_failure, s.last_failure_at_ms
  FROM qlsched.trigger_schedules AS s
 WHERE s.failures > 0
 ORDER BY s.project_id, s.trigger_id
 LIMIT $1;

-- name: failing_counts
-- For the metrics scrape: schedule rows whose last admits failed, those failed $1 times or
-- more in a row (stuck), and pending requests whose last admits failed. Partial index
-- (failing rows) and the pending requests' index: never a walk of the whole tables.
SELECT (SELECT pg_catalog.count(*) FROM qlsched.trigger_schedules AS s
         WHERE s.failures > 0) AS schedules,
       (SELECT pg_catalog.count(*) FROM qlsched.trigger_schedules AS s
         WHERE s.failures > 0 AND s.failures >= $1) AS stuck_schedules,
       (SELECT pg_catalog.count(*) FROM qlsched.control_requests AS r
         WHERE r.state = 'pending' AND r.failures > 0) AS requests;
