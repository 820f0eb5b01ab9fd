-- name: control_lock_schedule
-- Lock the schedule row a pause or resume acts on (admin, READ COMMITTED). Only the lock:
-- its joins would read this statement's snapshot while the lock follows the row to its
-- newest version, so what the action plans with is read by the next statement.
-- $1 project, $2 trigger.
SELECT true
  FROM qlsched.trigger_schedules AS s
 WHERE s.project_id = $1 AND s.trigger_id = $2
   FOR UPDATE OF s;

-- name: control_locked_schedule
-- The locked row, with what the resume plan needs of its trigger and project, and the
-- database time of the action: one snapshot taken after the lock, so row and spec agree.
-- $1 project, $2 trigger.
SELECT s.trigger_revision, s.next_fire_at_ms, s.paused_at_ms, s.pause_note,
       t.cron, t.timezone, t.dst_gap, t.dst_fold, t.updated_at_ms AS revised_at_ms,
       t.enabled AND t.revision = s.trigger_revision AND p.state = 'active' AS schedulable,
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
  JOIN qlsched.projects AS p ON p.project_id = s.project_id
 WHERE s.project_id = $1 AND s.trigger_id = $2;

-- name: control_pause
-- Pause a running row at $3 (database ms) with note $4: out of the claim index (not
-- active), and any claim on it void (cleared, claim and state versions up, so a replica
-- holding one fails its fence at admit). Cursor and revision stay. $1 project, $2 trigger.
UPDATE qlsched.trigger_schedules AS s
   SET paused_at_ms = $3::bigint, pause_note = $4::text, active = false,
       claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL,
       claim_version = s.claim_version + 1, state_version = s.state_version + 1,
       updated_at_ms = GREATEST($3::bigint, s.updated_at_ms)
 WHERE s.project_id = $1 AND s.trigger_id = $2 AND s.paused_at_ms IS NULL;

-- name: control_resume
-- Resume a paused row: cursor $3, catch-up occurrence $4 (or NULL), $5 added to
-- paused_total, at $6 (database ms); active again when its project is active, its trigger
-- enabled and its revision current (what publish keeps). $7: where the accounting window
-- starts for a row that had no cursor (kept when it has one). $1 project, $2 trigger.
UPDATE qlsched.trigger_schedules AS s
   SET paused_at_ms = NULL, pause_note = NULL, next_fire_at_ms = $3::bigint,
       decided_from_ms = COALESCE(s.decided_from_ms, $7::bigint),
       catch_up_at_ms = $4::bigint, paused_total = s.paused_total + $5::bigint,
       active = EXISTS (SELECT 1
                          FROM qlsched.triggers AS t
                          JOIN qlsched.projects AS p ON p.project_id = t.project_id
                         WHERE t.project_id = s.project_id AND t.trigger_id = s.trigger_id
                           AND t.enabled AND t.revision = s.trigger_revision
                           AND p.state = 'active'),
       state_version = s.state_version + 1,
       updated_at_ms = GREATEST($6::bigint, s.updated_at_ms)
 WHERE s.project_id = $1 AND s.trigger_id = $2 AND s.paused_at_ms IS NOT NULL;

-- name: control_record_action
-- Append one action and count it in its kind's totals, in the action's transaction. The
-- database fills in action_id, actor (the login role) and at_ms. $1 project, $2 trigger,
-- $3 revision, $4 kind, $5 note, $6 actor label, $7 occurrences, $8 detail (JSON object).
WITH a AS (
    INSERT INTO qlsched.schedule_actions (project_id, trigger_id, trigger_revision, kind, note,
                                          actor_label, occurrences, detail)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
    RETURNING action_id, kind, occurrences, actor, at_ms
), totals AS (
    INSERT INTO qlsched.schedule_action_totals AS x (kind, actions, occurrences)
    SELECT a.kind, 1, a.occurrences FROM a
        ON CONFLICT (kind) DO UPDATE
       SET actions = x.actions + 1, occurrences = x.occurrences + excluded.occurrences
)
SELECT a.action_id, a.actor, a.at_ms FROM a;

-- name: control_states
-- Pause state of schedules (arrays $1 projects, $2 triggers), for status, /v1/schedules and
-- the admin API's listing; rows that do not exist are absent.
SELECT s.project_id, s.trigger_id, s.paused_at_ms, s.pause_note, s.paused_total
  FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS k(p, t)
  JOIN qlsched.trigger_schedules AS s ON s.project_id = k.p AND s.trigger_id = k.t;

-- name: control_recent_actions
-- The latest $3 actions of each schedule (arrays $1 projects, $2 triggers), newest first:
-- one backward index read per trigger (schedule_actions_trigger_idx), never a sort of all.
SELECT a.project_id, a.trigger_id, a.action_id, a.kind, a.at_ms, a.actor, a.actor_label,
       a.note, a.occurrences
  FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS k(p, t)
 CROSS JOIN LATERAL (SELECT x.project_id, x.trigger_id, x.action_id, x.kind, x.at_ms,
                            x.actor, x.actor_label, x.note, x.occurrences
                       FROM qlsched.schedule_actions AS x
                      WHERE x.project_id = k.p AND x.trigger_id = k.t
                      ORDER BY x.action_id DESC
                      LIMIT $3) AS a
 ORDER BY a.project_id, a.trigger_id, a.action_id DESC;

-- name: control_action_totals
-- Actions per kind and the occurrences they accounted for, database-wide (the metrics
-- scrape: a handful of rows, whatever the audit's length).
SELECT x.kind, x.actions, x.occurrences
  FROM qlsched.schedule_action_totals AS x
 ORDER BY x.kind;

-- name: control_list_schedules
-- Schedules with their spec and control state for the admin API, in key order after
-- ($1 project, $2 trigger) (keyset paging; '' and '' for the first page), $3 rows at most.
-- Reads only what the admin and the observer may both read.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.enabled, t.cron,
       t.timezone, t.misfire_policy, t.misfire_grace_ms, s.next_fire_at_ms,
       s.last_scheduled_at_ms, s.paused_at_ms, s.pause_note, s.paused_total, s.skipped_total,
       s.coalesced_total, s.claim_owner, s.claim_expires_at_ms
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 WHERE (s.project_id, s.trigger_id) > ($1::text, $2::text)
 ORDER BY s.project_id, s.trigger_id
 LIMIT $3;
