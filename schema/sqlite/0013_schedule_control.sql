-- 0013 (the Edge's number for it; PostgreSQL's schedule control is its 0006): pause and
-- resume on the Edge file (docs/contract.md §12), as the cluster's. A paused row is not
-- active, so a round never reads it; paused_total counts the occurrences a pause held
-- back; catch_up_at_ms is the occurrence a `resume --catch-up fire_once` fires once.
-- Forward-only: never edit after release.

ALTER TABLE trigger_schedules ADD COLUMN paused_at_ms INTEGER;
ALTER TABLE trigger_schedules ADD COLUMN pause_note TEXT
    CHECK (length(pause_note) BETWEEN 1 AND 1000);
ALTER TABLE trigger_schedules ADD COLUMN paused_total INTEGER NOT NULL DEFAULT 0
    CHECK (paused_total >= 0);
ALTER TABLE trigger_schedules ADD COLUMN catch_up_at_ms INTEGER;

-- Append-only audit of control actions: who (the OS user, and the --actor label), when,
-- what, and how many occurrences it counted.
CREATE TABLE schedule_actions (
    action_id        INTEGER PRIMARY KEY,
    project_id       TEXT NOT NULL,
    trigger_id       TEXT NOT NULL,
    trigger_revision INTEGER NOT NULL CHECK (trigger_revision >= 1),
    kind             TEXT NOT NULL CHECK (kind IN ('pause', 'resume')),
    note             TEXT CHECK (length(note) BETWEEN 1 AND 1000),
    actor            TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    actor_label      TEXT CHECK (length(actor_label) BETWEEN 1 AND 200),
    at_ms            INTEGER NOT NULL,
    occurrences      INTEGER NOT NULL DEFAULT 0 CHECK (occurrences >= 0),
    FOREIGN KEY (project_id, trigger_id) REFERENCES triggers (project_id, trigger_id)
) STRICT;
CREATE INDEX schedule_actions_trigger_idx ON schedule_actions (project_id, trigger_id, action_id);
