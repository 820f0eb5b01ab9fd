-- name: accounting_rows
-- Each schedule row's accounting window and buckets (docs/contract.md §3 "Accounting"):
-- from `decided_from_ms` to the cursor (exclusive), the cron-keyed Runs of its revision in
-- it (those retention deleted beside them), and its counters. $1 projects (NULL: all). Rows with no window yet are left out.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.decided_from_ms,
       s.next_fire_at_ms, s.skipped_total, s.coalesced_total, s.paused_total,
       s.backfilled_total, s.already_admitted_total, s.overlap_skipped_total,
       s.deadline_cancelled_total, t.cron, t.timezone, t.dst_gap,
       t.dst_fold,
       (SELECT pg_catalog.count(*)
          FROM qlsched.runs AS r
         WHERE r.project_id = s.project_id AND r.trigger_id = s.trigger_id
           AND r.trigger_revision = s.trigger_revision
           AND r.idempotency_key LIKE 'ql3:cron:%'
           AND r.scheduled_for_ms >= s.decided_from_ms
           AND r.scheduled_for_ms < s.next_fire_at_ms) AS runs,
       -- Runs of the window that retention deleted (docs/contract.md §14): still Runs.
       (SELECT COALESCE(pg_catalog.sum(p.window_runs), 0)::bigint
          FROM qlsched.retention_pruned AS p
         WHERE p.project_id = s.project_id AND p.trigger_id = s.trigger_id
           AND p.trigger_revision = s.trigger_revision) AS pruned_runs
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 WHERE s.decided_from_ms IS NOT NULL AND s.next_fire_at_ms IS NOT NULL
   AND ($1::text[] IS NULL OR s.project_id = ANY ($1::text[]))
 ORDER BY s.project_id, s.trigger_id;
