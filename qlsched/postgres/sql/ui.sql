-- The dashboard's reads (`qlsched ui`), all as the observer role. Each is bounded: it walks
-- an index from a key for at most its LIMIT of entries (keyset paging), so a page deep in
-- a table of a million rows costs what the first one does.

-- name: ui_now_ms
-- The database's clock: every lag, age and "last hour" of a page is measured against it.
SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint;

-- name: ui_recent_owners
-- Replicas seen recently: the owners of the latest $1 Runs (runs_created_idx read
-- backwards), each with its Runs among them, its latest admit and its admit lag.
WITH latest AS (
    SELECT r.admitted_by_owner, r.created_at_ms, r.queued_at_ms, r.scheduled_for_ms
      FROM qlsched.runs AS r
     ORDER BY r.created_at_ms DESC
     LIMIT $1
)
SELECT l.admitted_by_owner AS owner, pg_catalog.count(*)::bigint AS runs,
       pg_catalog.max(l.created_at_ms) AS last_ms,
       pg_catalog.avg(l.queued_at_ms - l.scheduled_for_ms)::bigint AS mean_lag_ms,
       pg_catalog.max(l.queued_at_ms - l.scheduled_for_ms) AS max_lag_ms
  FROM latest AS l
 GROUP BY l.admitted_by_owner
 ORDER BY pg_catalog.max(l.created_at_ms) DESC;

-- name: ui_recent_workers
-- Workers seen recently: the worker ids on the Attempts of the latest $1 Runs.
WITH latest AS (
    SELECT r.run_id FROM qlsched.runs AS r ORDER BY r.created_at_ms DESC LIMIT $1
)
SELECT a.worker_id, pg_catalog.count(*)::bigint AS attempts,
       pg_catalog.max(a.created_at_ms) AS last_ms
  FROM latest AS l
  JOIN qlsched.attempts AS a ON a.run_id = l.run_id
 WHERE a.worker_id IS NOT NULL
 GROUP BY a.worker_id
 ORDER BY pg_catalog.max(a.created_at_ms) DESC;

-- name: ui_claims_now
-- Claims held now, by owner ($1 = now): live ones and expired ones (stuck: nobody
-- finished or released them), among the $2 that expire first (trigger_schedules_expiry_idx:
-- claims in flight only, a few per replica).
SELECT c.claim_owner AS owner,
       pg_catalog.count(*) FILTER (WHERE c.claim_expires_at_ms > $1)::bigint AS live,
       pg_catalog.count(*) FILTER (WHERE c.claim_expires_at_ms <= $1)::bigint AS expired
  FROM (SELECT s.claim_owner, s.claim_expires_at_ms
          FROM qlsched.trigger_schedules AS s
         WHERE s.active AND s.claim_token IS NOT NULL
         ORDER BY s.claim_expires_at_ms
         LIMIT $2) AS c
 GROUP BY c.claim_owner
 ORDER BY c.claim_owner;

-- name: ui_failed_since
-- Runs that failed at or after $1 (their finished_at_ms), counted up to $2
-- (runs_state_idx: state, finished_at_ms).
SELECT pg_catalog.count(*)::bigint
  FROM (SELECT 1 FROM qlsched.runs AS r
         WHERE r.state = 'failed' AND r.finished_at_ms >= $1
         ORDER BY r.finished_at_ms DESC
         LIMIT $2) AS f;

-- name: ui_stuck_requests
-- Pending requests whose claim expired ($1 = now): a replica took them and went away.
SELECT pg_catalog.count(*)::bigint
  FROM qlsched.control_requests AS q
 WHERE q.state = 'pending' AND q.claim_expires_at_ms <= $1;

-- name: ui_last_project
-- The greatest project id: the upper bound of an unfiltered schedules walk.
SELECT pg_catalog.max(p.project_id) FROM qlsched.projects AS p;

-- name: ui_schedules
-- One page of schedules in key order after ($1 project, $2 trigger), walking at most $8
-- entries of the primary key and no further than project $3; filters: $4 project ('' =
-- any), $5 a substring of PROJECT/TRIGGER ('' = any), $6 state ('' any, active, paused,
-- off, failing: admissions failing or the latest Run failed); $7 rows at most. A filter that matches few rows
-- so costs at most $8 entries per page (ui_schedules_walk_end says where the walk
-- stopped). The walk reads keys only and the search filters them before any row is
-- fetched; each row kept then finds its schedule, its trigger and its latest Run by key.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.enabled, t.cron,
       t.timezone, t.misfire_policy, t.misfire_grace_ms, t.jitter_ms, s.next_fire_at_ms,
       s.due_at_ms, s.last_scheduled_at_ms, s.claim_owner, s.claim_expires_at_ms,
       s.paused_at_ms, s.pause_note, s.skipped_total, s.coalesced_total, s.paused_total,
       s.failures, s.last_failure,
       l.state AS last_state, l.scheduled_for_ms AS last_scheduled_for_ms
  FROM (SELECT w.project_id, w.trigger_id
          FROM qlsched.trigger_schedules AS w
         WHERE (w.project_id, w.trigger_id) > ($1::text, $2::text)
           AND w.project_id <= $3::text
         ORDER BY w.project_id, w.trigger_id
         LIMIT $8) AS k
  JOIN qlsched.trigger_schedules AS s
    ON s.project_id = k.project_id AND s.trigger_id = k.trigger_id
 CROSS JOIN LATERAL (SELECT g.enabled, g.cron, g.timezone, g.misfire_policy,
                            g.misfire_grace_ms, g.jitter_ms
                       FROM qlsched.triggers AS g
                      WHERE g.project_id = s.project_id AND g.trigger_id = s.trigger_id
                      LIMIT 1) AS t
  LEFT JOIN LATERAL (SELECT r.state, r.scheduled_for_ms
                       FROM qlsched.runs AS r
                      WHERE r.project_id = s.project_id AND r.trigger_id = s.trigger_id
                      ORDER BY r.scheduled_for_ms DESC
                      LIMIT 1) AS l ON true
 WHERE ($4::text = '' OR k.project_id = $4::text)
   AND ($5::text = '' OR pg_catalog.strpos(k.project_id || '/' || k.trigger_id, $5::text) > 0)
   AND CASE $6::text
         WHEN 'active' THEN s.active
         WHEN 'paused' THEN s.paused_at_ms IS NOT NULL
         WHEN 'off' THEN NOT s.active AND s.paused_at_ms IS NULL
         WHEN 'failing' THEN s.failures > 0 OR l.state IS NOT DISTINCT FROM 'failed'
         ELSE true
       END
 ORDER BY k.project_id, k.trigger_id
 LIMIT $7;

-- name: ui_schedules_walk_end
-- The key ui_schedules' walk from ($1, $2) (bounded by project $3) stopped at after $4
-- entries; no row: the walk reached the end.
SELECT w.project_id, w.trigger_id
  FROM qlsched.trigger_schedules AS w
 WHERE (w.project_id, w.trigger_id) > ($1::text, $2::text)
   AND w.project_id <= $3::text
 ORDER BY w.project_id, w.trigger_id
OFFSET $4 - 1
 LIMIT 1;

-- name: ui_schedule
-- One schedule with its trigger: $1 project, $2 trigger. No row: no such schedule.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.enabled, t.cron,
       t.timezone, t.dst_gap, t.dst_fold, t.misfire_policy, t.misfire_grace_ms, t.jitter_ms,
       t.task_id, t.task_revision, s.next_fire_at_ms, s.due_at_ms, s.last_scheduled_at_ms,
       s.claim_owner, s.claim_expires_at_ms, s.paused_at_ms, s.pause_note, s.skipped_total,
       s.coalesced_total, s.paused_total, s.failures, s.last_failure, s.last_failure_at_ms,
       p.state AS project_state
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
  JOIN qlsched.projects AS p ON p.project_id = s.project_id
 WHERE s.project_id = $1 AND s.trigger_id = $2;

-- fragment: ui_run_line
-- A row of a list of Runs (postgres/ui.py's RunLine) from Runs `r`, each with its latest
-- event (when it last changed state); the trigger's history and the Runs page both list
-- these, so one column list serves every list of Runs.
SELECT r.run_id, r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms, r.admitted_by_owner,
       r.started_at_ms, r.finished_at_ms,
       e.at_ms AS last_event_at_ms
  FROM qlsched.runs AS r
  LEFT JOIN LATERAL (SELECT v.at_ms FROM qlsched.run_events AS v
                      WHERE v.run_id = r.run_id ORDER BY v.seq DESC LIMIT 1) AS e ON true

-- name: ui_trigger_runs
-- A trigger's Runs, latest occurrence first, scheduled before $3, $4 at most, each with
-- its latest event (when it last changed state). Ordered by runs_trigger_idx alone, so no
-- plan sorts a trigger's history: the caller completes the last occurrence's ties with
-- ui_trigger_runs_at and pages on scheduled_for_ms.
-- include: ui_run_line
 WHERE r.project_id = $1 AND r.trigger_id = $2 AND r.scheduled_for_ms < $3::bigint
 ORDER BY r.scheduled_for_ms DESC
 LIMIT $4;

-- name: ui_trigger_runs_at
-- A trigger's Runs scheduled for exactly $3 (ties of one occurrence: re-published
-- revisions, a trigger-now in the same millisecond), at most $4, in no order.
-- include: ui_run_line
 WHERE r.project_id = $1 AND r.trigger_id = $2 AND r.scheduled_for_ms = $3::bigint
 LIMIT $4;

-- name: ui_runs
-- Runs newest first, created before ($1 created_at, $2 run id) and at or after $3, in
-- state $4 ('' = any), $5 at most (runs_created_idx read backwards).
-- include: ui_run_line
 WHERE (r.created_at_ms, r.run_id) < ($1::bigint, $2::uuid)
   AND r.created_at_ms >= $3::bigint
   AND ($4::text = '' OR r.state = $4::text)
 ORDER BY r.created_at_ms DESC, r.run_id DESC
 LIMIT $5;

-- name: ui_runs_in_state
-- ui_runs for one state ($4), walking runs_state_created_idx from the key: a rare state is
-- as fast as a common one. Both bounds are written on the index's columns, so that even a
-- generic plan (which cannot know how common $4 is) walks this index, not runs_created_idx.
-- include: ui_run_line
 WHERE r.state = $4::text
   AND (r.state, r.created_at_ms, r.run_id) < ($4::text, $1::bigint, $2::uuid)
   AND (r.state, r.created_at_ms) >= ($4::text, $3::bigint)
 ORDER BY r.state DESC, r.created_at_ms DESC, r.run_id DESC
 LIMIT $5;

-- name: ui_run
-- One Run: $1 run id.
SELECT r.run_id, r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms, r.admitted_by_owner,
       r.started_at_ms, r.finished_at_ms,
       r.task_id, r.task_revision, r.cancel_requested,
       (SELECT v.at_ms FROM qlsched.run_events AS v
         WHERE v.run_id = r.run_id ORDER BY v.seq DESC LIMIT 1) AS last_event_at_ms
  FROM qlsched.runs AS r
 WHERE r.run_id = $1;

-- name: ui_run_attempts
-- A Run's Attempts (the redacted view: never a callback token): $1 run id.
SELECT a.attempt_no, a.attempt_id, a.executor_kind, a.state, a.worker_id, a.started_at_ms,
       a.created_at_ms, a.error
  FROM qlsched.attempts_redacted AS a
 WHERE a.run_id = $1
 ORDER BY a.attempt_no;

-- name: ui_run_events
-- A Run's events in order: $1 run id.
SELECT v.seq, v.type, v.at_ms, v.actor
  FROM qlsched.run_events AS v
 WHERE v.run_id = $1
 ORDER BY v.seq;

-- name: ui_requests
-- Trigger-now and backfill requests, newest first, created before ($1 created_at, $2
-- request id), $3 at most (control_requests_created_idx read backwards).
SELECT q.request_id, q.project_id, q.trigger_id, q.trigger_revision, q.kind, q.note,
       q.actor, q.requested_by, q.created_at_ms, q.state, q.refused_reason, q.done_at_ms,
       q.from_ms, q.to_ms, q.total, q.cursor_ms, q.admitted, q.already_admitted,
       q.claim_owner, q.overlap_skipped
  FROM qlsched.control_requests AS q
 WHERE (q.created_at_ms, q.request_id) < ($1::bigint, $2::uuid)
 ORDER BY q.created_at_ms DESC, q.request_id DESC
 LIMIT $3;

-- name: ui_actions
-- The audit log, newest first: actions before id $1, of project $2 and trigger $3 (''
-- = any), $4 at most (the primary key read backwards, or schedule_actions_trigger_idx).
SELECT a.action_id, a.project_id, a.trigger_id, a.trigger_revision, a.kind, a.note,
       a.actor, a.actor_label, a.at_ms, a.occurrences
  FROM qlsched.schedule_actions AS a
 WHERE a.action_id < $1
   AND ($2::text = '' OR a.project_id = $2::text)
   AND ($3::text = '' OR a.trigger_id = $3::text)
 ORDER BY a.action_id DESC
 LIMIT $4;
