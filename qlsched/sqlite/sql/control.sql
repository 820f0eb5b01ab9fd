-- name: control_schedule
-- The row a pause or resume acts on, with what the resume plan needs of its trigger and
-- project (read inside the action's BEGIN IMMEDIATE: no round writes meanwhile).
-- ?1 project, ?2 trigger.
SELECT s.trigger_revision, s.next_fire_at_ms, s.paused_at_ms, s.pause_note,
       t.cron, t.timezone, t.dst_gap, t.dst_fold, t.updated_at_ms, t.jitter_ms,
       t.enabled AND t.revision = s.trigger_revision AND p.state = 'active'
  FROM trigger_schedules AS s
  JOIN triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
  JOIN projects AS p ON p.project_id = s.project_id
 WHERE s.project_id = ?1 AND s.trigger_id = ?2;

-- name: control_pause
-- Pause a running row at ?3 with note ?4: not active (no round reads it), state version up
-- (a round that read it before cannot write it). Cursor and revision stay.
-- ?1 project, ?2 trigger.
UPDATE trigger_schedules
   SET paused_at_ms = ?3, pause_note = ?4, active = 0, state_version = state_version + 1,
       updated_at_ms = max(?3, updated_at_ms)
 WHERE project_id = ?1 AND trigger_id = ?2 AND paused_at_ms IS NULL;

-- name: control_resume
-- Resume a paused row: cursor ?3 (its due time ?7), catch-up occurrence ?4 (or NULL), ?5
-- added to paused_total, at ?6; active again when its project is active and its trigger
-- enabled (what publish keeps). ?1 project, ?2 trigger.
UPDATE trigger_schedules
   SET paused_at_ms = NULL, pause_note = NULL, next_fire_at_ms = ?3, due_at_ms = ?7,
       catch_up_at_ms = ?4, paused_total = paused_total + ?5,
       active = EXISTS (SELECT 1 FROM triggers AS t
                          JOIN projects AS p ON p.project_id = t.project_id
                         WHERE t.project_id = trigger_schedules.project_id
                           AND t.trigger_id = trigger_schedules.trigger_id
                           AND t.enabled AND t.revision = trigger_schedules.trigger_revision
                           AND p.state = 'active'),
       state_version = state_version + 1, updated_at_ms = max(?6, updated_at_ms)
 WHERE project_id = ?1 AND trigger_id = ?2 AND paused_at_ms IS NOT NULL;

-- name: control_record_action
-- Append one action. ?1 project, ?2 trigger, ?3 revision, ?4 kind, ?5 note, ?6 actor (the
-- OS user), ?7 actor label, ?8 at ms, ?9 occurrences.
INSERT INTO schedule_actions (project_id, trigger_id, trigger_revision, kind, note, actor,
                              actor_label, at_ms, occurrences)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
RETURNING action_id;
