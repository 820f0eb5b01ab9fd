-- name: project_get
SELECT state, revision FROM projects WHERE project_id = ?1;

-- name: project_insert
-- ?1 project, ?2 state, ?3 now ms.
INSERT INTO projects (project_id, state, revision, created_at_ms, updated_at_ms)
VALUES (?1, ?2, 1, ?3, ?3);

-- name: project_update
-- A changed state is a new project revision. ?1 project, ?2 state, ?3 now ms.
UPDATE projects
   SET state = ?2, revision = revision + 1, updated_at_ms = max(?3, updated_at_ms)
 WHERE project_id = ?1;

-- name: schedule_set_active
-- Keep the round's filter in step with the project state; a changed flag moves the state
-- version, so a round that read the row before cannot write it. A paused row stays
-- inactive (only resume makes it active). ?1 project, ?2 active (0/1).
UPDATE trigger_schedules
   SET active = (?2 AND paused_at_ms IS NULL
                 AND (SELECT t.enabled FROM triggers AS t
                       WHERE t.project_id = trigger_schedules.project_id
                         AND t.trigger_id = trigger_schedules.trigger_id)),
       state_version = state_version + 1
 WHERE project_id = ?1
   AND active IS NOT (?2 AND paused_at_ms IS NULL
                      AND (SELECT t.enabled FROM triggers AS t
                            WHERE t.project_id = trigger_schedules.project_id
                              AND t.trigger_id = trigger_schedules.trigger_id));

-- name: task_get
SELECT revision, content_digest FROM tasks WHERE project_id = ?1 AND task_id = ?2;

-- name: task_insert
-- ?1 project, ?2 task, ?3 digest, ?4 command, ?5 now ms.
INSERT INTO tasks (project_id, task_id, revision, content_digest, command, created_at_ms,
                   updated_at_ms)
VALUES (?1, ?2, 1, ?3, ?4, ?5, ?5);

-- name: task_update
-- A changed task is a new revision. ?1 project, ?2 task, ?3 digest, ?4 command, ?5 now ms.
UPDATE tasks
   SET revision = revision + 1, content_digest = ?3, command = ?4,
       updated_at_ms = max(?5, updated_at_ms)
 WHERE project_id = ?1 AND task_id = ?2
RETURNING revision;

-- name: execution_revision_insert
-- The pinned remote_worker execution revision of a task revision.
-- ?1 id, ?2 project, ?3 task, ?4 task revision, ?5 payload, ?6 digest, ?7 now ms.
INSERT INTO execution_revisions (execution_revision_id, project_id, task_id, task_revision,
                                 executor_kind, payload, digest, created_at_ms)
VALUES (?1, ?2, ?3, ?4, 'remote_worker', ?5, ?6, ?7);

-- name: task_pin
-- The current revision of a task, its digest and its execution revision.
SELECT k.revision, k.content_digest, e.execution_revision_id
  FROM tasks AS k
  JOIN execution_revisions AS e
    ON e.project_id = k.project_id AND e.task_id = k.task_id AND e.task_revision = k.revision
 WHERE k.project_id = ?1 AND k.task_id = ?2;

-- name: trigger_get
SELECT revision, content_digest FROM triggers WHERE project_id = ?1 AND trigger_id = ?2;

-- name: trigger_project
-- The project that already has trigger id ?1, if another than ?2 does.
SELECT project_id FROM triggers WHERE trigger_id = ?1 AND project_id <> ?2;

-- name: trigger_insert
-- ?1 project, ?2 trigger, ?3 enabled, ?4 cron, ?5 timezone, ?6 misfire policy,
-- ?7 grace ms, ?8 task, ?9 task revision, ?10 execution revision, ?11 digest, ?12 now ms,
-- ?13 DST gap, ?14 DST fold policy, ?15 jitter ms, ?16 overlap policy, ?17 start deadline.
INSERT INTO triggers (project_id, trigger_id, revision, kind, enabled, cron, timezone,
                      misfire_policy, misfire_grace_ms, task_id, task_revision,
                      execution_revision_id, content_digest, created_at_ms, updated_at_ms,
                      dst_gap, dst_fold, jitter_ms, overlap, start_deadline_ms)
VALUES (?1, ?2, 1, 'cron', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, ?13, ?14, ?15, ?16,
        ?17);

-- name: trigger_update
-- A changed trigger is a new revision (same parameters as trigger_insert).
UPDATE triggers
   SET revision = revision + 1, enabled = ?3, cron = ?4, timezone = ?5, misfire_policy = ?6,
       misfire_grace_ms = ?7, task_id = ?8, task_revision = ?9, execution_revision_id = ?10,
       content_digest = ?11, updated_at_ms = max(?12, updated_at_ms), dst_gap = ?13,
       dst_fold = ?14, jitter_ms = ?15, overlap = ?16, start_deadline_ms = ?17
 WHERE project_id = ?1 AND trigger_id = ?2
RETURNING revision;

-- name: schedule_insert
-- A new trigger head: uninitialised cursor. ?1 project, ?2 trigger, ?3 active, ?4 now ms.
INSERT INTO trigger_schedules (project_id, trigger_id, trigger_revision, active, updated_at_ms)
VALUES (?1, ?2, 1, ?3, ?4);

-- name: schedule_reset
-- A new trigger revision: cursor cleared, state version + 1, so a round that read the old
-- revision cannot write; a paused row stays paused and inactive (its resume counts from the
-- later of the pause and this revision). ?1 project, ?2 trigger, ?3 revision, ?4 active,
-- ?5 now ms.
UPDATE trigger_schedules
   SET trigger_revision = ?3, active = (?4 AND paused_at_ms IS NULL), next_fire_at_ms = NULL,
       due_at_ms = NULL, catch_up_at_ms = NULL,
       state_version = state_version + 1, updated_at_ms = max(?5, updated_at_ms)
 WHERE project_id = ?1 AND trigger_id = ?2;

-- name: triggers_of_project
-- Every trigger of project ?1 with what its digest is computed from (for --prune).
SELECT trigger_id, enabled, cron, timezone, misfire_policy, misfire_grace_ms, task_id,
       dst_gap, dst_fold, jitter_ms, overlap, start_deadline_ms
  FROM triggers WHERE project_id = ?1 ORDER BY trigger_id;

-- name: triggers_of_task
-- Every trigger pinned to task ?2 of project ?1: a changed task re-pins them all.
SELECT trigger_id, enabled, cron, timezone, misfire_policy, misfire_grace_ms, task_id,
       dst_gap, dst_fold, jitter_ms, overlap, start_deadline_ms
  FROM triggers WHERE project_id = ?1 AND task_id = ?2 ORDER BY trigger_id;
