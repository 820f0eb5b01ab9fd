-- 0017 (the Edge's number for PostgreSQL's 0014): overlap policy and start deadline per
-- trigger on the Edge file (docs/contract.md §12, §13), with the cluster's names, values and
-- meanings. `edge run` decides the policy in its round's transaction and cancels Runs past
-- their start deadline; a dispatcher of the user's own moves Runs to `running` and to their
-- terminal state. Forward-only: never edit after release.
--
-- SQLite cannot alter a CHECK, and `runs` is referenced by `attempts` and `run_events`:
-- the three tables are rebuilt the way SQLite documents (a new table, the rows copied, the
-- old one dropped, the new one renamed), which the migration runner does with foreign-key
-- enforcement off and `PRAGMA foreign_key_check` before its COMMIT.

ALTER TABLE triggers ADD COLUMN overlap TEXT NOT NULL DEFAULT 'allow'
    CHECK (overlap IN ('allow', 'skip', 'buffer_one', 'cancel_other'));
ALTER TABLE triggers ADD COLUMN start_deadline_ms INTEGER
    CHECK (start_deadline_ms BETWEEN 1 AND 604800000);

-- `held`: buffer_one's Run, waiting until the trigger has nothing queued or running (no
-- dispatcher should take it; `edge run` makes it `queued`). `started_at_ms` and
-- `finished_at_ms`: written by the dispatcher (and by `edge run` when it cancels);
-- `start_by_ms`: a queued Run not started by then is cancelled, reason `start_deadline`.
CREATE TABLE runs_0017 (
    run_id                 TEXT PRIMARY KEY,
    project_id             TEXT NOT NULL,
    trigger_id             TEXT NOT NULL,
    trigger_revision       INTEGER NOT NULL,
    task_id                TEXT NOT NULL,
    task_revision          INTEGER NOT NULL,
    execution_revision_id  TEXT NOT NULL,
    scheduled_for_ms       INTEGER NOT NULL,
    idempotency_key        TEXT NOT NULL UNIQUE,
    state                  TEXT NOT NULL CHECK (state IN ('held', 'queued', 'dispatching',
                               'running', 'succeeded', 'failed', 'cancelled')),
    owner                  TEXT NOT NULL CHECK (owner IN ('runtime')),
    queued_at_ms           INTEGER,
    cancel_requested       INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    created_at_ms          INTEGER NOT NULL,
    admitted_by_owner      TEXT NOT NULL,
    admitted_claim_token   TEXT NOT NULL,
    admitted_claim_version INTEGER NOT NULL,
    started_at_ms          INTEGER,
    finished_at_ms         INTEGER,
    start_by_ms            INTEGER,
    cancel_reason          TEXT CHECK (cancel_reason IN ('start_deadline', 'overlap'))
) STRICT;
INSERT INTO runs_0017 (run_id, project_id, trigger_id, trigger_revision, task_id,
                       task_revision, execution_revision_id, scheduled_for_ms,
                       idempotency_key, state, owner, queued_at_ms, cancel_requested,
                       created_at_ms, admitted_by_owner, admitted_claim_token,
                       admitted_claim_version)
SELECT run_id, project_id, trigger_id, trigger_revision, task_id, task_revision,
       execution_revision_id, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms,
       cancel_requested, created_at_ms, admitted_by_owner, admitted_claim_token,
       admitted_claim_version
  FROM runs;
DROP TABLE runs;
ALTER TABLE runs_0017 RENAME TO runs;
CREATE INDEX runs_trigger_idx ON runs (project_id, trigger_id, scheduled_for_ms);

CREATE TABLE attempts_0017 (
    attempt_id     TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    attempt_no     INTEGER NOT NULL CHECK (attempt_no >= 1),
    executor_kind  TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('claimed', 'dispatching', 'running',
                       'succeeded', 'failed', 'lost', 'cancelled')),
    worker_id      TEXT,
    session_id     TEXT,
    lease_id       TEXT,
    offer_id       TEXT,
    callback_token TEXT,
    started_at_ms  INTEGER,
    result         TEXT,
    error          TEXT,
    created_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER,
    UNIQUE (run_id, attempt_no)
) STRICT;
INSERT INTO attempts_0017 (attempt_id, run_id, attempt_no, executor_kind, state, worker_id,
                           session_id, lease_id, offer_id, callback_token, started_at_ms,
                           result, error, created_at_ms)
SELECT attempt_id, run_id, attempt_no, executor_kind, state, worker_id, session_id,
       lease_id, offer_id, callback_token, started_at_ms, result, error, created_at_ms
  FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_0017 RENAME TO attempts;

CREATE TABLE run_events_0017 (
    event_id TEXT PRIMARY KEY,
    run_id   TEXT NOT NULL REFERENCES runs (run_id),
    seq      INTEGER NOT NULL CHECK (seq >= 1),
    type     TEXT NOT NULL CHECK (type IN ('run.created', 'run.queued', 'run.dispatching',
                 'run.running', 'run.succeeded', 'run.failed', 'run.cancelled',
                 'run.recovery_marked', 'run.cancel_requested', 'run.attempt_failed',
                 'run.attempt_lost', 'run.held', 'run.released')),
    at_ms    INTEGER NOT NULL,
    actor    TEXT NOT NULL,
    UNIQUE (run_id, seq)
) STRICT;
INSERT INTO run_events_0017 (event_id, run_id, seq, type, at_ms, actor)
SELECT event_id, run_id, seq, type, at_ms, actor FROM run_events;
DROP TABLE run_events;
ALTER TABLE run_events_0017 RENAME TO run_events;

-- The accounting's buckets, as the cluster's: occurrences the policy gave no Run, and Runs
-- a start deadline cancelled.
ALTER TABLE trigger_schedules ADD COLUMN overlap_skipped_total INTEGER NOT NULL DEFAULT 0
    CHECK (overlap_skipped_total >= 0);
ALTER TABLE trigger_schedules ADD COLUMN deadline_cancelled_total INTEGER NOT NULL DEFAULT 0
    CHECK (deadline_cancelled_total >= 0);

-- Trigger-now and backfill follow the trigger's policy unless recorded with
-- `overlap = 'allow'` (NULL: the trigger's); what the policy skipped is counted on the
-- request. A CHECK of the table bounds admitted + already_admitted by the total; the
-- runner keeps the three together within it.
ALTER TABLE control_requests ADD COLUMN overlap TEXT CHECK (overlap = 'allow');
ALTER TABLE control_requests ADD COLUMN overlap_skipped INTEGER NOT NULL DEFAULT 0
    CHECK (overlap_skipped >= 0);

-- A trigger's unfinished Runs, read by a decision under a policy other than `allow` (never
-- under `allow`); finished Runs leave the index, so the read never walks history.
CREATE INDEX runs_unfinished_idx ON runs (project_id, trigger_id, state)
    WHERE state IN ('held', 'queued', 'running');
-- Held Runs to release, oldest first.
CREATE INDEX runs_held_idx ON runs (created_at_ms, run_id) WHERE state = 'held';
-- Unstarted queued Runs with a deadline, soonest first.
CREATE INDEX runs_start_by_idx ON runs (start_by_ms)
    WHERE state = 'queued' AND started_at_ms IS NULL AND start_by_ms IS NOT NULL;
