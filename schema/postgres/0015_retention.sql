-- 0015: retention (docs/contract.md §14): finished Runs older than the database's
-- `retention_ms` are deleted with their Attempts, events and recovery marks, by replicas,
-- in bounded batches each claimed with SKIP LOCKED (no leader). History no longer grows
-- without bound. (0014 is another change's number; the runner accepts the gap.)
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- The one setting row, the admin's. NULL: off (the default: an upgrade deletes nothing).
-- The bounds keep a typo from emptying the history (at least a minute) or overflowing the
-- horizon arithmetic (at most 100 years). Who changed it last and when, by the database's
-- clock, for `retention show`. No role may insert or delete the row: there is exactly one.
CREATE TABLE qlsched.retention (
    id            boolean PRIMARY KEY DEFAULT true CHECK (id),
    retention_ms  bigint CHECK (retention_ms BETWEEN 60000 AND 3153600000000),
    updated_by    text CHECK (pg_catalog.length(updated_by) BETWEEN 1 AND 200),
    updated_at_ms bigint
);
INSERT INTO qlsched.retention (id) VALUES (true);

-- What retention deleted, per trigger revision, kept in the prune's own statement: the
-- counts for metrics and status (a few rows per trigger, never the history), `window_runs`
-- (cron-keyed Runs that lay in the schedule row's accounting window: the accounting adds
-- them back, so every occurrence stays in one bucket), and `through_ms`, the latest
-- scheduled time deleted: a backfill reaching back to it would admit deleted occurrences
-- again (their keys are free), so it is refused even if the retention is later raised.
CREATE TABLE qlsched.retention_pruned (
    project_id       text NOT NULL,
    trigger_id       text NOT NULL,
    trigger_revision bigint NOT NULL CHECK (trigger_revision >= 1),
    runs             bigint NOT NULL CHECK (runs >= 0),
    attempts         bigint NOT NULL CHECK (attempts >= 0),
    events           bigint NOT NULL CHECK (events >= 0),
    marks            bigint NOT NULL CHECK (marks >= 0),
    window_runs      bigint NOT NULL CHECK (window_runs BETWEEN 0 AND runs),
    through_ms       bigint NOT NULL,
    PRIMARY KEY (project_id, trigger_id, trigger_revision)
);

-- The prune walks finished Runs oldest first and stops at its LIMIT or at the horizon:
-- unfinished Runs are not in this index, and runs_state_idx (state, finished_at_ms) cannot
-- give one order across three states, so a batch would sort the whole history.
CREATE INDEX runs_finished_idx ON qlsched.runs (finished_at_ms)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
-- Deleting a Run checks recovery_marks for rows that still name it (the foreign key) and
-- the prune deletes the marks by Run: without this index both read every mark ever made.
CREATE INDEX recovery_marks_run_idx ON qlsched.recovery_marks (run_id);

-- One prune batch, the only way the runtime deletes anything: at most `max_runs` finished Runs
-- whose finished_at_ms lies before the horizon (the database's clock now less
-- retention_ms), oldest first through runs_finished_idx, each locked with SKIP LOCKED so
-- two replicas never wait on or delete one Run; with their recovery marks, events and
-- Attempts (the foreign keys are checked at the statement's end), and the counts added to
-- retention_pruned in key order (two batches of one trigger revision wait for each other's
-- statement there, milliseconds, and lock their total rows in one order: no deadlock). A function with the owner's rights, so the runtime is granted EXECUTE, not
-- DELETE on four tables (nor the UPDATE that FOR UPDATE needs): even a replica that went
-- wrong can delete no unfinished Run and nothing inside the horizon. Returns one row.
CREATE FUNCTION qlsched.prune_finished_runs(max_runs integer)
    RETURNS TABLE (runs bigint, attempts bigint, events bigint, marks bigint,
                   horizon_ms bigint)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $prune$
    WITH horizon AS (
        SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
               - r.retention_ms AS before_ms
          FROM qlsched.retention AS r
         WHERE r.retention_ms IS NOT NULL
    ), batch AS (
        SELECT run.run_id
          FROM qlsched.runs AS run
         WHERE run.state IN ('succeeded', 'failed', 'cancelled')
           AND run.finished_at_ms < (SELECT h.before_ms FROM horizon AS h)
         ORDER BY run.finished_at_ms
         LIMIT $1
           FOR UPDATE SKIP LOCKED
    ), ids AS (
        SELECT pg_catalog.array_agg(b.run_id) AS run_ids FROM batch AS b
    ), marks AS (
        DELETE FROM qlsched.recovery_marks AS m
         WHERE m.run_id = ANY ((SELECT i.run_ids FROM ids AS i)::uuid[])
        RETURNING m.run_id
    ), events AS (
        DELETE FROM qlsched.run_events AS e
         WHERE e.run_id = ANY ((SELECT i.run_ids FROM ids AS i)::uuid[])
        RETURNING e.run_id
    ), attempts AS (
        DELETE FROM qlsched.attempts AS a
         WHERE a.run_id = ANY ((SELECT i.run_ids FROM ids AS i)::uuid[])
        RETURNING a.run_id
    ), runs AS (
        DELETE FROM qlsched.runs AS r
         WHERE r.run_id = ANY ((SELECT i.run_ids FROM ids AS i)::uuid[])
        RETURNING r.run_id, r.project_id, r.trigger_id, r.trigger_revision,
                  r.scheduled_for_ms, r.idempotency_key
    ), counted AS (
        SELECT x.run_id, pg_catalog.count(*) FILTER (WHERE x.kind = 'a') AS attempts,
               pg_catalog.count(*) FILTER (WHERE x.kind = 'e') AS events,
               pg_catalog.count(*) FILTER (WHERE x.kind = 'm') AS marks
          FROM (SELECT a.run_id, 'a' AS kind FROM attempts AS a
                UNION ALL SELECT e.run_id, 'e' FROM events AS e
                UNION ALL SELECT m.run_id, 'm' FROM marks AS m) AS x
         GROUP BY x.run_id
    ), per_run AS (
        SELECT d.run_id, d.project_id, d.trigger_id, d.trigger_revision, d.scheduled_for_ms,
               -- In the accounting window (qlsched.tools.accounting): a cron key of the
               -- schedule row's revision at or after where cron began deciding it.
               (d.idempotency_key LIKE 'ql3:cron:%' AND s.trigger_revision = d.trigger_revision
                AND d.scheduled_for_ms >= s.decided_from_ms) IS TRUE AS in_window,
               COALESCE(c.attempts, 0) AS attempts, COALESCE(c.events, 0) AS events,
               COALESCE(c.marks, 0) AS marks
          FROM runs AS d
          LEFT JOIN counted AS c ON c.run_id = d.run_id
          LEFT JOIN qlsched.trigger_schedules AS s
            ON s.project_id = d.project_id AND s.trigger_id = d.trigger_id
    ), totals AS (
        SELECT p.project_id, p.trigger_id, p.trigger_revision, pg_catalog.count(*) AS runs,
               pg_catalog.sum(p.attempts)::bigint AS attempts,
               pg_catalog.sum(p.events)::bigint AS events,
               pg_catalog.sum(p.marks)::bigint AS marks,
               pg_catalog.count(*) FILTER (WHERE p.in_window) AS window_runs,
               pg_catalog.max(p.scheduled_for_ms) AS through_ms
          FROM per_run AS p
         GROUP BY p.project_id, p.trigger_id, p.trigger_revision
    ), kept AS (
        INSERT INTO qlsched.retention_pruned AS k (project_id, trigger_id, trigger_revision,
                                                   runs, attempts, events, marks,
                                                   window_runs, through_ms)
        SELECT t.project_id, t.trigger_id, t.trigger_revision, t.runs, t.attempts, t.events,
               t.marks, t.window_runs, t.through_ms
          FROM totals AS t
         ORDER BY t.project_id, t.trigger_id, t.trigger_revision
            ON CONFLICT (project_id, trigger_id, trigger_revision) DO UPDATE
           SET runs = k.runs + EXCLUDED.runs, attempts = k.attempts + EXCLUDED.attempts,
               events = k.events + EXCLUDED.events, marks = k.marks + EXCLUDED.marks,
               window_runs = k.window_runs + EXCLUDED.window_runs,
               through_ms = GREATEST(k.through_ms, EXCLUDED.through_ms)
        RETURNING 1
    )
    SELECT (SELECT pg_catalog.count(*) FROM runs) AS runs,
           (SELECT pg_catalog.count(*) FROM attempts) AS attempts,
           (SELECT pg_catalog.count(*) FROM events) AS events,
           (SELECT pg_catalog.count(*) FROM marks) AS marks,
           (SELECT h.before_ms FROM horizon AS h) AS horizon_ms
$prune$;
REVOKE ALL ON FUNCTION qlsched.prune_finished_runs(integer) FROM PUBLIC;

INSERT INTO qlsched.capability (name, version) VALUES ('qlsched.retention', 1);

-- The admin sets it; everyone else reads it and cannot change it (no other grant).
GRANT SELECT ON qlsched.retention TO qlsched_admin, qlsched_runtime, qlsched_observer,
    qlsched_worker;
GRANT UPDATE (retention_ms, updated_by, updated_at_ms) ON qlsched.retention TO qlsched_admin;
-- The runtime prunes through the function alone.
GRANT EXECUTE ON FUNCTION qlsched.prune_finished_runs(integer) TO qlsched_runtime;
-- The admin reads `through_ms` to refuse a backfill when it is recorded, the runtime to
-- refuse a chunk retention caught up with before it was admitted; the observer reads the
-- totals for status and metrics.
GRANT SELECT ON qlsched.retention_pruned TO qlsched_admin, qlsched_observer;
GRANT SELECT (project_id, trigger_id, through_ms) ON qlsched.retention_pruned
    TO qlsched_runtime;
