-- name: publish_lock
-- Publishers on one database take turns (transaction-scoped advisory lock).
SELECT pg_catalog.pg_advisory_xact_lock(7262736368656476);

-- name: publish_work_mem
-- A large file's arrays are sorted and joined in memory, not spilled to disk.
SET LOCAL work_mem = '64MB';

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

-- name: tasks_current
-- The stored digest of each task of the file (arrays $1 projects, $2 task ids), locked for
-- the update that may follow; tasks not yet published are absent.
SELECT k.project_id, k.task_id, k.content_digest
  FROM qlsched.tasks AS k
  JOIN ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS f(p, t)
    ON k.project_id = f.p AND k.task_id = f.t
   FOR UPDATE OF k;

-- name: tasks_insert
-- New tasks at revision 1. Arrays $1 projects, $2 tasks, $3 digests, $4 commands; $5 now ms.
INSERT INTO qlsched.tasks (project_id, task_id, revision, content_digest, command,
                           created_at_ms, updated_at_ms)
SELECT f.p, f.t, 1, f.d, f.c, $5::bigint, $5::bigint
  FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                  pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::text[])) AS f(p, t, d, c);

-- name: tasks_update
-- Changed tasks: a new revision each (same parameters as tasks_insert).
UPDATE qlsched.tasks AS k
   SET revision = k.revision + 1, content_digest = f.d, command = f.c,
       updated_at_ms = GREATEST($5::bigint, k.updated_at_ms)
  FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                  pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::text[])) AS f(p, t, d, c)
 WHERE k.project_id = f.p AND k.task_id = f.t;

-- name: execution_revisions_insert
-- The pinned remote_worker execution revision of each new task revision (the task's current
-- one). Arrays $1 ids, $2 projects, $3 tasks, $4 payloads, $5 digests; $6 now ms.
INSERT INTO qlsched.execution_revisions (execution_revision_id, project_id, task_id,
                                         task_revision, executor_kind, payload, digest,
                                         created_at_ms)
SELECT f.id, f.p, f.t, k.revision, 'remote_worker', f.payload, f.d, $6::bigint
  FROM ROWS FROM (pg_catalog.unnest($1::uuid[]), pg_catalog.unnest($2::text[]),
                  pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::text[]),
                  pg_catalog.unnest($5::text[])) AS f(id, p, t, payload, d)
  JOIN qlsched.tasks AS k ON k.project_id = f.p AND k.task_id = f.t;

-- name: task_pins
-- The current revision, digest and execution revision of tasks (arrays $1 projects, $2 ids).
SELECT k.project_id, k.task_id, k.revision, k.content_digest, e.execution_revision_id
  FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS f(p, t)
  JOIN qlsched.tasks AS k ON k.project_id = f.p AND k.task_id = f.t
  JOIN qlsched.execution_revisions AS e
    ON e.project_id = k.project_id AND e.task_id = k.task_id AND e.task_revision = k.revision;

-- name: triggers_differing
-- Of the file's triggers (arrays $1 ordinals, $2 projects, $3 ids, $4 digests), those whose
-- stored digest differs: `stored` false for a trigger not yet published. Unchanged ones
-- return nothing, so publishing an unchanged file reads back no rows.
SELECT f.n, t.trigger_id IS NOT NULL AS stored
  FROM ROWS FROM (pg_catalog.unnest($1::int[]), pg_catalog.unnest($2::text[]),
                  pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::text[])) AS f(n, p, id, d)
  LEFT JOIN qlsched.triggers AS t ON t.project_id = f.p AND t.trigger_id = f.id
 WHERE t.content_digest IS DISTINCT FROM f.d
 ORDER BY f.n;

-- name: triggers_elsewhere
-- Which of these new trigger ids (arrays $1 ordinals, $2 projects, $3 ids) another project
-- already has (ids are unique across projects: the idempotency key names the trigger, not
-- its project); the first in file order is reported.
SELECT f.n, t.project_id
  FROM ROWS FROM (pg_catalog.unnest($1::int[]), pg_catalog.unnest($2::text[]),
                  pg_catalog.unnest($3::text[])) AS f(n, p, id)
  JOIN qlsched.triggers AS t ON t.trigger_id = f.id AND t.project_id <> f.p
 ORDER BY f.n
 LIMIT 1;

-- name: triggers_write
-- New triggers at revision 1 with their schedule rows (uninitialised cursor, no claim), and
-- changed triggers at a new revision with their schedule rows reset: cursor and claim
-- cleared, state and claim versions incremented, so every claim taken under an older
-- revision fails its fence forever. Arrays $1 projects, $2 ids, $3 enabled, $4 crons,
-- $5 timezones, $6 misfire policies, $7 grace ms, $8 tasks, $9 task revisions, $10 execution
-- revisions, $11 digests, $12 active, $13 added (new, else changed); $14 now ms; arrays $15
-- DST gap and $16 DST fold policies, $17 jitter ms (pinned on the schedule row with the
-- revision), $18 overlap policies, $19 start deadlines (ms, NULL: none). Pause state is not part of the spec: a changed row keeps it, and a paused row
-- stays inactive.
WITH f AS (
    SELECT *
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                      pg_catalog.unnest($3::boolean[]), pg_catalog.unnest($4::text[]),
                      pg_catalog.unnest($5::text[]), pg_catalog.unnest($6::text[]),
                      pg_catalog.unnest($7::bigint[]), pg_catalog.unnest($8::text[]),
                      pg_catalog.unnest($9::bigint[]), pg_catalog.unnest($10::uuid[]),
                      pg_catalog.unnest($11::text[]), pg_catalog.unnest($12::boolean[]),
                      pg_catalog.unnest($13::boolean[]), pg_catalog.unnest($15::text[]),
                      pg_catalog.unnest($16::text[]), pg_catalog.unnest($17::bigint[]),
                      pg_catalog.unnest($18::text[]), pg_catalog.unnest($19::bigint[]))
           AS f(p, id, enabled, cron, tz, misfire, grace, task, task_rev, exec_rev, d, active,
                added, gap, fold, jitter, overlap, deadline)
), added AS (
    INSERT INTO qlsched.triggers (project_id, trigger_id, revision, kind, enabled, cron,
                                  timezone, misfire_policy, misfire_grace_ms, task_id,
                                  task_revision, execution_revision_id, content_digest,
                                  created_at_ms, updated_at_ms, dst_gap, dst_fold, jitter_ms,
                                  overlap, start_deadline_ms)
    SELECT p, id, 1, 'cron', enabled, cron, tz, misfire, grace, task, task_rev, exec_rev, d,
           $14::bigint, $14::bigint, gap, fold, jitter, overlap, deadline
      FROM f
     WHERE f.added
), added_schedules AS (
    -- Every new row of f is inserted above or the statement fails, so the schedule rows come
    -- from f itself (no join back); their foreign keys are checked at the statement's end.
    INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision, active,
                                           updated_at_ms, jitter_ms)
    SELECT p, id, 1, active, $14::bigint, jitter
      FROM f
     WHERE f.added
), changed AS (
    UPDATE qlsched.triggers AS t
       SET revision = t.revision + 1, enabled = f.enabled, cron = f.cron, timezone = f.tz,
           misfire_policy = f.misfire, misfire_grace_ms = f.grace, task_id = f.task,
           task_revision = f.task_rev, execution_revision_id = f.exec_rev,
           content_digest = f.d, updated_at_ms = GREATEST($14::bigint, t.updated_at_ms),
           dst_gap = f.gap, dst_fold = f.fold, jitter_ms = f.jitter, overlap = f.overlap,
           start_deadline_ms = f.deadline
      FROM f
     WHERE NOT f.added AND t.project_id = f.p AND t.trigger_id = f.id
    RETURNING t.project_id, t.trigger_id, t.revision, f.active, f.jitter
)
UPDATE qlsched.trigger_schedules AS s
   SET trigger_revision = c.revision, active = c.active AND s.paused_at_ms IS NULL,
       next_fire_at_ms = NULL, decided_from_ms = NULL, jitter_ms = c.jitter,
       claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL,
       state_version = s.state_version + 1, claim_version = s.claim_version + 1,
       updated_at_ms = GREATEST($14::bigint, s.updated_at_ms)
  FROM changed AS c
 WHERE s.project_id = c.project_id AND s.trigger_id = c.trigger_id;

-- name: schedule_set_active
-- Keep the claim filter in step with the project state (archive/unarchive) without a new
-- trigger revision; admit re-verifies the real rows anyway. A paused row stays inactive
-- (only resume revives it). $1 project, $2 active.
UPDATE qlsched.trigger_schedules AS s
   SET active = $2 AND t.enabled AND t.revision = s.trigger_revision AND s.paused_at_ms IS NULL
  FROM qlsched.triggers AS t
 WHERE s.project_id = $1 AND t.project_id = s.project_id AND t.trigger_id = s.trigger_id
   AND s.active IS DISTINCT FROM ($2 AND t.enabled AND t.revision = s.trigger_revision
                                  AND s.paused_at_ms IS NULL);

-- name: triggers_to_prune
-- The enabled triggers of projects $1 (array) that the file (arrays $2 projects, $3 ids)
-- does not list, with what their digest is computed from (for --prune).
SELECT t.project_id, t.trigger_id, t.enabled, t.cron, t.timezone, t.misfire_policy,
       t.misfire_grace_ms, t.task_id, t.dst_gap, t.dst_fold, t.jitter_ms, t.overlap,
       t.start_deadline_ms
  FROM qlsched.triggers AS t
 WHERE t.project_id = ANY ($1::text[]) AND t.enabled
   AND NOT EXISTS (SELECT 1
                     FROM ROWS FROM (pg_catalog.unnest($2::text[]),
                                     pg_catalog.unnest($3::text[])) AS f(p, id)
                    WHERE f.p = t.project_id AND f.id = t.trigger_id)
 ORDER BY t.project_id, t.trigger_id;

-- name: triggers_to_repin
-- Every trigger pinned to one of tasks (arrays $1 projects, $2 tasks) that the file (arrays
-- $3 projects, $4 ids) does not list: a changed task re-pins them all, listed or not.
SELECT t.project_id, t.trigger_id, t.enabled, t.cron, t.timezone, t.misfire_policy,
       t.misfire_grace_ms, t.task_id, t.dst_gap, t.dst_fold, t.jitter_ms, t.overlap,
       t.start_deadline_ms
  FROM qlsched.triggers AS t
  JOIN ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS k(p, task)
    ON t.project_id = k.p AND t.task_id = k.task
 WHERE NOT EXISTS (SELECT 1
                     FROM ROWS FROM (pg_catalog.unnest($3::text[]),
                                     pg_catalog.unnest($4::text[])) AS f(p, id)
                    WHERE f.p = t.project_id AND f.id = t.trigger_id)
 ORDER BY t.project_id, t.trigger_id;
