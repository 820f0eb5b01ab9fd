-- 0003: each role reads only what it needs (docs/contract.md §4), and the table readiness keeps the
-- catalog the migrations define in (§12; written by `qlsched migrate`, never by a migration).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- The observer (status, metrics, the demo's verifier) reads no secret: not tasks.command,
-- execution_revisions.payload or attempts.callback_token. Column grants, so `SELECT *` on
-- those three tables is refused rather than silently narrowed.
REVOKE SELECT ON qlsched.tasks, qlsched.execution_revisions, qlsched.attempts
    FROM qlsched_observer;
GRANT SELECT (project_id, task_id, revision, content_digest, created_at_ms, updated_at_ms)
    ON qlsched.tasks TO qlsched_observer;
GRANT SELECT (execution_revision_id, project_id, task_id, task_revision, executor_kind, digest,
    created_at_ms) ON qlsched.execution_revisions TO qlsched_observer;
GRANT SELECT (attempt_id, run_id, attempt_no, executor_kind, state, worker_id, session_id,
    lease_id, offer_id, started_at_ms, result, error, created_at_ms)
    ON qlsched.attempts TO qlsched_observer;

-- Whether an Attempt carries a callback token, without the token: the verifier's pristine
-- check needs only that. Runs with the owner's rights (a view), so the column stays closed.
CREATE VIEW qlsched.attempts_redacted AS
SELECT a.attempt_id, a.run_id, a.attempt_no, a.executor_kind, a.state, a.worker_id,
       a.session_id, a.lease_id, a.offer_id, a.callback_token IS NOT NULL AS has_callback_token,
       a.started_at_ms, a.result, a.error, a.created_at_ms
  FROM qlsched.attempts AS a;
GRANT SELECT ON qlsched.attempts_redacted TO qlsched_observer;

-- The runtime reads of a task only what admit compares (never the command), and writes
-- events it never reads back.
REVOKE SELECT ON qlsched.tasks, qlsched.run_events FROM qlsched_runtime;
GRANT SELECT (project_id, task_id, revision, content_digest) ON qlsched.tasks
    TO qlsched_runtime;

-- The expected catalog: one row per object of schema qlsched as the shipped migrations
-- define it. `migrate` (as a superuser) rebuilds it from the files and pins its SHA-256 as
-- a database setting only a superuser or the database owner can change; readiness compares
-- the live catalog to it. Nobody but the owner can write it; the roles that check read it.
CREATE TABLE qlsched.catalog_reference (
    kind       text NOT NULL,
    object     text NOT NULL,
    definition text NOT NULL,
    PRIMARY KEY (kind, object)
);
GRANT SELECT ON qlsched.catalog_reference TO qlsched_runtime, qlsched_observer;
