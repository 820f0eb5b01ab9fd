-- name: publish_lock
-- Publishers on one database take turns (transaction-scoped advisory lock).
SELECT pg_catalog.pg_advisory_xact_lock(7262736368656476);

-- name: db_now_ms
SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint;

-- name: project_get
SELECT state, revision FROM qlsched.projects WHERE project_id = $1 FOR UPDATE;

-- name: project_insert
-- $1 project, $2 state, $3 now ms.
INSERT INTO qlsched.projects (project_id, state, revision, created_at_ms, updated_at_ms)
VALUES ($1, $2, 1, $3, $3);

-- name: project_update
-- A changed state is a new project revision. $1 project, $2 state, $3 now ms.
UPDATE qlsched.projects
   SET state = $2, revision = revision + 1, updated_at_ms = GREATEST($3, updated_at_ms)
 WHERE project_id = $1;

-- name: task_get
SELECT revision, content_digest FROM qlsched.tasks
 WHERE project_id = $1 AND task_id = $2 FOR UPDATE;

-- name: task_insert
-- $1 project, $2 task, $3 digest, $4 command, $5 now ms.
INSERT INTO qlsched.tasks (project_id, task_id, revision, content_digest, command,
                           created_at_ms, updated_at_ms)
VALUES ($1, $2, 1, $3, $4, $5, $5);

-- name: task_update
-- A changed task is a new revision. $1 project, $2 task, $3 digest, $4 command, $5 now ms.
UPDATE qlsched.tasks
   SET revision = revision + 1, content_digest = $3, command = $4,
       updated_at_ms = GREATEST($5, updated_at_ms)
 WHERE project_id = $1 AND task_id = $2
RETURNING revision;

-- name: execution_revision_insert
-- The pinned remote_worker execution revision of a task revision.
-- $1 id, $2 project, $3 task, $4 task revision, $5 payload, $6 digest, $7 now ms.
INSERT INTO qlsched.execution_revisions (execution_revision_id, project_id, task_id,
                                         task_revision, executor_kind, payload, digest,
                                         created_at_ms)
VALUES ($1, $2, $3, $4, 'remote_worker', $5, $6, $7);

-- name: task_pin
-- The current revision of a task and its execution revision.
SELECT k.revision, k.content_digest, e.execution_revision_id
  FROM qlsched.tasks AS k
  JOIN qlsched.execution_revisions AS e
    ON e.project_id = k.project_id AND e.task_id = k.task_id AND e.task_revision = k.revision
 WHERE k.project_id = $1 AND k.task_id = $2;

-- name: trigger_get
SELECT revision, content_digest FROM qlsched.triggers
 WHERE project_id = $1 AND trigger_id = $2 FOR UPDATE;

-- name: trigger_project
-- The project that already has this trigger id, if another does (ids are unique across
-- projects: the idempotency key names the trigger, not its project).
SELECT project_id FROM qlsched.triggers WHERE trigger_id = $1 AND project_id <> $2;

-- name: trigger_insert
-- $1 project, $2 trigger, $3 enabled, $4 cron, $5 timezone, $6 misfire policy,
-- $7 grace ms, $8 task, $9 task revision, $10 execution revision, $11 digest, $12 now ms.
INSERT INTO qlsched.triggers (project_id, trigger_id, revision, kind, enabled, cron, timezone,
                              misfire_policy, misfire_grace_ms, task_id, task_revision,
                              execution_revision_id, content_digest, created_at_ms,
                              updated_at_ms)
VALUES ($1, $2, 1, 'cron', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12);

-- name: trigger_update
-- A changed trigger is a new revision (same parameters as trigger_insert).
UPDATE qlsched.triggers
   SET revision = revision + 1, enabled = $3, cron = $4, timezone = $5, misfire_policy = $6,
       misfire_grace_ms = $7, task_id = $8, task_revision = $9, execution_revision_id = $10,
       content_digest = $11, updated_at_ms = GREATEST($12, updated_at_ms)
 WHERE project_id = $1 AND trigger_id = $2
RETURNING revision;

-- name: schedule_insert
-- The schedule row of a new trigger head: uninitialised cursor, no claim.
-- $1 project, $2 trigger, $3 revision, $4 active, $5 now ms.
INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision, active,
                                       updated_at_ms)
VALUES ($1, $2, $3, $4, $5);

-- name: schedule_reset
-- A new trigger revision: cursor and claim cleared, state and claim versions incremented,
-- so every claim taken under an older revision fails its fence forever.
-- $1 project, $2 trigger, $3 revision, $4 active, $5 now ms.
UPDATE qlsched.trigger_schedules
   SET trigger_revision = $3, active = $4, next_fire_at_ms = NULL,
       claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL,
       state_version = state_version + 1, claim_version = claim_version + 1,
       updated_at_ms = GREATEST($5, updated_at_ms)
 WHERE project_id = $1 AND trigger_id = $2;

-- name: schedule_set_active
-- Keep the claim filter in step with the project state (archive/unarchive) without a new
-- trigger revision; admit re-verifies the real rows anyway. $1 project, $2 active.
UPDATE qlsched.trigger_schedules AS s
   SET active = $2 AND t.enabled AND t.revision = s.trigger_revision
  FROM qlsched.triggers AS t
 WHERE s.project_id = $1 AND t.project_id = s.project_id AND t.trigger_id = s.trigger_id
   AND s.active IS DISTINCT FROM ($2 AND t.enabled AND t.revision = s.trigger_revision);

-- name: triggers_of_project
-- Every trigger of project $1 with what its digest is computed from (for --prune).
SELECT t.trigger_id, t.enabled, t.cron, t.timezone, t.misfire_policy, t.misfire_grace_ms,
       t.task_id
  FROM qlsched.triggers AS t
 WHERE t.project_id = $1
 ORDER BY t.trigger_id;

-- name: triggers_of_task
-- Every trigger pinned to task $2 of project $1, with what its digest is computed from: a
-- changed task re-pins them all, listed in the file or not.
SELECT t.trigger_id, t.enabled, t.cron, t.timezone, t.misfire_policy, t.misfire_grace_ms,
       t.task_id
  FROM qlsched.triggers AS t
 WHERE t.project_id = $1 AND t.task_id = $2
 ORDER BY t.trigger_id;
