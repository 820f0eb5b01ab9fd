-- 0008, numbered as its PostgreSQL counterpart: jitter per trigger (docs/contract.md §10).
-- An occurrence scheduled for S becomes due at S + h (qlsched.core.jitter computes h, the
-- same value as PostgreSQL's). Forward-only: never edit after release.

ALTER TABLE triggers ADD COLUMN jitter_ms INTEGER NOT NULL DEFAULT 0
    CHECK (jitter_ms BETWEEN 0 AND 3600000);

-- The due time of the cursor, written with it by every cursor write (NULL with a NULL
-- cursor); an existing row has no jitter, so its due time is its cursor.
ALTER TABLE trigger_schedules ADD COLUMN due_at_ms INTEGER;
UPDATE trigger_schedules SET due_at_ms = next_fire_at_ms;

-- A round's ordered scan walks due times, not cursors: same name, same shape.
DROP INDEX trigger_schedules_due_idx;
CREATE INDEX trigger_schedules_due_idx ON trigger_schedules
    (coalesce(due_at_ms, -1), project_id, trigger_id) WHERE active = 1;
