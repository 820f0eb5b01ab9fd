-- 0006: schedule control (docs/contract.md §10): pause state beside each schedule row, and
-- the append-only audit of control actions with its per-kind totals (for metrics).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- Pause lives beside the spec, not in it: no digest or revision covers these columns, so a
-- re-publish neither unpauses nor counts as a change. A paused row is never `active`, which
-- keeps it out of the claim index without touching the claim or its index; publish keeps it
-- so, and the check makes a publish that forgot fail instead of reviving the row.
-- `catch_up_at_ms` is the occurrence `resume --catch-up fire_once` left at the cursor: the
-- claim hands that one cursor value to the decision as `fire_once`, whatever the grace.
ALTER TABLE qlsched.trigger_schedules
    ADD COLUMN paused_at_ms bigint,
    ADD COLUMN pause_note text CHECK (pg_catalog.length(pause_note) BETWEEN 1 AND 1000),
    ADD COLUMN paused_total bigint NOT NULL DEFAULT 0 CHECK (paused_total >= 0),
    ADD COLUMN catch_up_at_ms bigint,
    ADD CONSTRAINT trigger_schedules_paused_inactive CHECK (paused_at_ms IS NULL OR NOT active);

-- One row per control action (pause, resume, and the kinds later migrations add), written
-- in the action's own transaction. The database fills in who and when: `actor` is the
-- session's login role and `at_ms` its clock, and the admin may not insert either column
-- (column grants below); `actor_label` is the optional name the operator gave (--actor).
-- Append-only: no role is granted UPDATE, DELETE or TRUNCATE.
CREATE TABLE qlsched.schedule_actions (
    action_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id       text NOT NULL,
    trigger_id       text NOT NULL,
    trigger_revision bigint NOT NULL CHECK (trigger_revision >= 1),
    kind             text NOT NULL CHECK (kind ~ '^[a-z][a-z_]{0,39}$'),
    note             text CHECK (pg_catalog.length(note) BETWEEN 1 AND 1000),
    actor            text NOT NULL DEFAULT (SESSION_USER)::text,
    actor_label      text CHECK (pg_catalog.length(actor_label) BETWEEN 1 AND 200),
    at_ms            bigint NOT NULL
                         DEFAULT ((EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint),
    occurrences      bigint NOT NULL DEFAULT 0 CHECK (occurrences >= 0),
    detail           jsonb NOT NULL DEFAULT '{}'::jsonb
                         CHECK (pg_catalog.jsonb_typeof(detail) = 'object'),
    FOREIGN KEY (project_id, trigger_id) REFERENCES qlsched.triggers (project_id, trigger_id)
);
-- A trigger's latest actions (status, /v1/schedules): an index read backwards, never a sort.
CREATE INDEX schedule_actions_trigger_idx ON qlsched.schedule_actions
    (project_id, trigger_id, action_id);

-- Actions and the occurrences they accounted for, per kind, kept in the action's transaction:
-- a metrics scrape reads a handful of rows here instead of counting an audit that only grows.
CREATE TABLE qlsched.schedule_action_totals (
    kind        text PRIMARY KEY CHECK (kind ~ '^[a-z][a-z_]{0,39}$'),
    actions     bigint NOT NULL CHECK (actions >= 0),
    occurrences bigint NOT NULL CHECK (occurrences >= 0)
);

INSERT INTO qlsched.capability (name, version) VALUES ('qlsched.schedule_control', 1);

-- Grants: the admin records actions (and pauses and resumes through its existing UPDATE on
-- trigger_schedules); the runtime and the observer read them (/v1/schedules, metrics, status).
GRANT SELECT ON qlsched.schedule_actions TO qlsched_admin;
GRANT INSERT (project_id, trigger_id, trigger_revision, kind, note, actor_label, occurrences,
    detail) ON qlsched.schedule_actions TO qlsched_admin;
GRANT SELECT, INSERT, UPDATE ON qlsched.schedule_action_totals TO qlsched_admin;
GRANT SELECT ON qlsched.schedule_actions, qlsched.schedule_action_totals
    TO qlsched_runtime, qlsched_observer;
