-- 0016 (the Edge's number for it; PostgreSQL's requests are its 0007 and 0009): trigger-now
-- and backfill requests on the Edge file (docs/contract.md §10, §12), as the cluster's.
-- `edge trigger` and `edge backfill` record a request; the one `edge run` of the file
-- admits it in its own transaction, fenced by the request's state and cursor (no lease).
-- Forward-only: never edit after release.

-- One row per request, for the trigger revision current when it was made (re-published
-- before admission: refused). `cursor_ms` is a backfill's progress (the last occurrence
-- handled); `next_ms` its next occurrence, which the runner takes only once it lies before
-- the cron cursor (a backfill waiting for cron holds no slot). `requested_by` is the OS
-- user, `actor` the --actor label. `failures` counts admits that failed in a row: at the
-- bound the request is refused `failed_repeatedly`, never retried forever in silence.
CREATE TABLE control_requests (
    request_id       TEXT PRIMARY KEY CHECK (length(request_id) = 36),
    project_id       TEXT NOT NULL,
    trigger_id       TEXT NOT NULL,
    trigger_revision INTEGER NOT NULL CHECK (trigger_revision >= 1),
    kind             TEXT NOT NULL CHECK (kind IN ('trigger', 'backfill')),
    note             TEXT CHECK (length(note) BETWEEN 1 AND 1000),
    actor            TEXT CHECK (length(actor) BETWEEN 1 AND 200),
    requested_by     TEXT NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 200),
    created_at_ms    INTEGER NOT NULL,
    state            TEXT NOT NULL DEFAULT 'pending'
                         CHECK (state IN ('pending', 'done', 'refused')),
    refused_reason   TEXT CHECK (length(refused_reason) BETWEEN 1 AND 40),
    done_at_ms       INTEGER,
    from_ms          INTEGER,
    to_ms            INTEGER,
    total            INTEGER CHECK (total BETWEEN 0 AND 1000000),
    max_occurrences  INTEGER CHECK (max_occurrences BETWEEN 1 AND 1000000),
    cursor_ms        INTEGER,
    next_ms          INTEGER,
    admitted         INTEGER NOT NULL DEFAULT 0 CHECK (admitted >= 0),
    already_admitted INTEGER NOT NULL DEFAULT 0 CHECK (already_admitted >= 0),
    failures         INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_failure     TEXT CHECK (length(last_failure) BETWEEN 1 AND 80),
    updated_at_ms    INTEGER NOT NULL,
    FOREIGN KEY (project_id, trigger_id) REFERENCES triggers (project_id, trigger_id),
    CHECK ((state = 'pending') = (done_at_ms IS NULL)),
    CHECK ((state = 'refused') = (refused_reason IS NOT NULL)),
    CHECK (CASE kind
             WHEN 'trigger' THEN from_ms IS NULL AND to_ms IS NULL AND total IS NULL
                                 AND max_occurrences IS NULL AND cursor_ms IS NULL
             ELSE from_ms IS NOT NULL AND to_ms IS NOT NULL AND from_ms <= to_ms
                  AND total IS NOT NULL AND max_occurrences IS NOT NULL
                  AND total <= max_occurrences
           END),
    CHECK (admitted + already_admitted <= coalesce(total, 1))
) STRICT;

-- The runner's look at the requests walks only pending ones, trigger-now first: empty when
-- nobody asked, so a round that finds nothing costs one probe of an empty index.
CREATE INDEX control_requests_pending_idx ON control_requests
    (kind <> 'trigger', created_at_ms, request_id) WHERE state = 'pending';
-- `edge status` shows the latest requests (read backwards, whatever the history's size).
CREATE INDEX control_requests_created_idx ON control_requests (created_at_ms);

-- Cron Fires whose key another path (a backfill) had already admitted: the cursor moved
-- past them and the Run that holds the key is their bucket (as the cluster's column).
ALTER TABLE trigger_schedules ADD COLUMN already_admitted_total INTEGER NOT NULL DEFAULT 0
    CHECK (already_admitted_total >= 0);

-- The audit takes the requests' kinds too. SQLite cannot alter a CHECK: the table is
-- rebuilt under its own name, its rows and index kept.
ALTER TABLE schedule_actions RENAME TO schedule_actions_0013;
CREATE TABLE schedule_actions (
    action_id        INTEGER PRIMARY KEY,
    project_id       TEXT NOT NULL,
    trigger_id       TEXT NOT NULL,
    trigger_revision INTEGER NOT NULL CHECK (trigger_revision >= 1),
    kind             TEXT NOT NULL CHECK (kind IN ('pause', 'resume', 'trigger', 'backfill')),
    note             TEXT CHECK (length(note) BETWEEN 1 AND 1000),
    actor            TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    actor_label      TEXT CHECK (length(actor_label) BETWEEN 1 AND 200),
    at_ms            INTEGER NOT NULL,
    occurrences      INTEGER NOT NULL DEFAULT 0 CHECK (occurrences >= 0),
    FOREIGN KEY (project_id, trigger_id) REFERENCES triggers (project_id, trigger_id)
) STRICT;
INSERT INTO schedule_actions SELECT * FROM schedule_actions_0013;
DROP TABLE schedule_actions_0013;
CREATE INDEX schedule_actions_trigger_idx ON schedule_actions (project_id, trigger_id, action_id);
