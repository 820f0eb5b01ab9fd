-- name: due_rows
-- A round's read (no write, no lease): active rows due at ?1 or uninitialised, in claim order
-- (by due time: the cursor plus its jitter), with the spec a decision needs. ?1 now ms,
-- ?2 limit.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.state_version, s.next_fire_at_ms,
       t.cron, t.timezone,
       -- The occurrence a resume left to catch up fires once whatever the grace.
       CASE WHEN s.next_fire_at_ms = s.catch_up_at_ms THEN 'fire_once'
            ELSE t.misfire_policy END,
       t.misfire_grace_ms, t.content_digest,
       t.task_id, t.task_revision, t.execution_revision_id, t.dst_gap, t.dst_fold,
       t.jitter_ms, t.overlap, t.start_deadline_ms
  FROM trigger_schedules AS s
  JOIN triggers AS t
    ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
   AND t.revision = s.trigger_revision
 WHERE s.active = 1 AND coalesce(s.due_at_ms, -1) <= ?1
 ORDER BY coalesce(s.due_at_ms, -1), s.project_id, s.trigger_id
 LIMIT ?2;

-- name: execution_check
-- The pinned execution revision a round's Runs will carry, with its task's current revision
-- (the digest is re-computed from the payload). ?1 execution revision id.
SELECT e.executor_kind, e.payload, e.digest, e.task_revision, k.revision
  FROM execution_revisions AS e
  LEFT JOIN tasks AS k ON k.project_id = e.project_id AND k.task_id = e.task_id
 WHERE e.execution_revision_id = ?1;

-- name: schedule_advance
-- The compare-and-set: moves the cursor only if revision, state version and cursor are the
-- ones the round read. ?1 project, ?2 trigger, ?3 revision, ?4 state version, ?5 read cursor,
-- ?6 next cursor, ?7 scheduled_for (NULL keeps it), ?8 skipped, ?9 coalesced, ?10 now ms,
-- ?11 the next cursor's due time.
UPDATE trigger_schedules
   SET next_fire_at_ms = ?6, due_at_ms = ?11,
       last_scheduled_at_ms = coalesce(?7, last_scheduled_at_ms),
       state_version = state_version + 1,
       skipped_total = skipped_total + ?8,
       coalesced_total = coalesced_total + ?9,
       updated_at_ms = max(updated_at_ms, ?10)
 WHERE project_id = ?1 AND trigger_id = ?2 AND trigger_revision = ?3
   AND state_version = ?4 AND next_fire_at_ms IS ?5 AND active = 1;

-- name: schedule_observe
-- A refused write's row, to name what moved. ?1 project, ?2 trigger.
SELECT s.trigger_revision, s.state_version, s.next_fire_at_ms, s.active, p.state, t.enabled
  FROM trigger_schedules AS s
  JOIN triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
  JOIN projects AS p ON p.project_id = s.project_id
 WHERE s.project_id = ?1 AND s.trigger_id = ?2;

-- name: run_insert
-- The Run, with the round's fence. ?1 run, ?2 project, ?3 trigger, ?4 revision, ?5 task,
-- ?6 task revision, ?7 execution revision, ?8 scheduled_for, ?9 key, ?10 now, ?11 owner,
-- ?12 token, ?13 state version (a request's: nominal), ?14 state ('queued', or 'held' by
-- overlap buffer_one), ?15 start deadline (NULL: none). A key that already has a Run (cron
-- and a backfill share the cron key) inserts nothing: the caller counts it as admitted.
INSERT INTO runs (run_id, project_id, trigger_id, trigger_revision, task_id, task_revision,
                  execution_revision_id, scheduled_for_ms, idempotency_key, state, owner,
                  queued_at_ms, cancel_requested, created_at_ms, admitted_by_owner,
                  admitted_claim_token, admitted_claim_version, start_by_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?14, 'runtime', ?10, 0, ?10, ?11, ?12, ?13, ?15)
    ON CONFLICT (idempotency_key) DO NOTHING;

-- name: run_by_key
-- Which Run holds key ?1 (after an insert that found it taken).
SELECT run_id FROM runs WHERE idempotency_key = ?1;

-- name: count_already_admitted
-- A cron Fire found its key taken (a backfill admitted the occurrence): counted on its row,
-- in the round's transaction. ?1 project, ?2 trigger.
UPDATE trigger_schedules SET already_admitted_total = already_admitted_total + 1
 WHERE project_id = ?1 AND trigger_id = ?2;

-- name: attempt_insert
-- The pristine claimed remote_worker Attempt. ?1 attempt, ?2 run, ?3 now ms.
INSERT INTO attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms)
VALUES (?1, ?2, 1, 'remote_worker', 'claimed', ?3);

-- name: events_insert
-- run.created then ?6 (run.queued, or run.held). ?1 event 1, ?2 event 2, ?3 run, ?4 now ms,
-- ?5 actor.
INSERT INTO run_events (event_id, run_id, seq, type, at_ms, actor)
VALUES (?1, ?3, 1, 'run.created', ?4, ?5), (?2, ?3, 2, ?6, ?4, ?5);

-- name: due_backlog
-- Active rows due now or uninitialised: the backlog gauge. ?1 now ms.
SELECT count(*) FROM trigger_schedules
 WHERE active = 1 AND coalesce(due_at_ms, -1) <= ?1;

-- name: schedules_list
-- Status, metrics and /v1/schedules' pages: up to ?3 rows after key (?1 project, ?2
-- trigger) in key order; the first page starts after ('', ''), before every key.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.cron, t.timezone,
       s.next_fire_at_ms, s.last_scheduled_at_ms, s.skipped_total, s.coalesced_total,
       t.dst_gap, t.dst_fold, t.jitter_ms, s.due_at_ms, s.paused_at_ms, s.pause_note,
       s.paused_total, s.overlap_skipped_total, s.deadline_cancelled_total
  FROM trigger_schedules AS s
  JOIN triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 WHERE (s.project_id, s.trigger_id) > (?1, ?2)
 ORDER BY s.project_id, s.trigger_id
 LIMIT ?3;
