-- The Edge profile (docs/contract.md §12): one SQLite file, one writer process, no lease.
-- Tables and columns carry the PostgreSQL schema's names (§4), so the same audit queries
-- run on both profiles; the claim columns are absent: a cursor compare-and-set fences writes.

CREATE TABLE projects (
    project_id    TEXT PRIMARY KEY,
    state         TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
    revision      INTEGER NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE tasks (
    project_id     TEXT NOT NULL REFERENCES projects (project_id),
    task_id        TEXT NOT NULL,
    revision       INTEGER NOT NULL CHECK (revision >= 1),
    content_digest TEXT NOT NULL CHECK (length(content_digest) = 64),
    command        TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (project_id, task_id)
) STRICT;

CREATE TABLE execution_revisions (
    execution_revision_id TEXT PRIMARY KEY,
    project_id            TEXT NOT NULL,
    task_id               TEXT NOT NULL,
    task_revision         INTEGER NOT NULL CHECK (task_revision >= 1),
    executor_kind         TEXT NOT NULL,
    payload               TEXT NOT NULL,
    digest                TEXT NOT NULL CHECK (length(digest) = 64),
    created_at_ms         INTEGER NOT NULL,
    FOREIGN KEY (project_id, task_id) REFERENCES tasks (project_id, task_id),
    UNIQUE (project_id, task_id, task_revision)
) STRICT;

CREATE TABLE triggers (
    project_id            TEXT NOT NULL REFERENCES projects (project_id),
    trigger_id            TEXT NOT NULL UNIQUE,
    revision              INTEGER NOT NULL CHECK (revision >= 1),
    kind                  TEXT NOT NULL DEFAULT 'cron' CHECK (kind IN ('cron')),
    enabled               INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    cron                  TEXT NOT NULL CHECK (length(cron) BETWEEN 1 AND 200),
    timezone              TEXT NOT NULL DEFAULT 'UTC' CHECK (length(timezone) BETWEEN 1 AND 64),
    misfire_policy        TEXT NOT NULL DEFAULT 'skip'
                              CHECK (misfire_policy IN ('skip', 'fire_once')),
    misfire_grace_ms      INTEGER NOT NULL DEFAULT 60000
                              CHECK (misfire_grace_ms BETWEEN 0 AND 86400000),
    task_id               TEXT NOT NULL,
    task_revision         INTEGER NOT NULL CHECK (task_revision >= 1),
    execution_revision_id TEXT NOT NULL REFERENCES execution_revisions (execution_revision_id),
    content_digest        TEXT NOT NULL CHECK (length(content_digest) = 64),
    created_at_ms         INTEGER NOT NULL,
    updated_at_ms         INTEGER NOT NULL,
    PRIMARY KEY (project_id, trigger_id),
    FOREIGN KEY (project_id, task_id) REFERENCES tasks (project_id, task_id)
) STRICT;

-- One row per trigger head. `active` (project active, trigger enabled) is kept by publish.
CREATE TABLE trigger_schedules (
    project_id           TEXT NOT NULL,
    trigger_id           TEXT NOT NULL,
    trigger_revision     INTEGER NOT NULL CHECK (trigger_revision >= 1),
    active               INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1)),
    next_fire_at_ms      INTEGER,
    last_scheduled_at_ms INTEGER,
    state_version        INTEGER NOT NULL DEFAULT 0 CHECK (state_version >= 0),
    updated_at_ms        INTEGER NOT NULL,
    skipped_total        INTEGER NOT NULL DEFAULT 0 CHECK (skipped_total >= 0),
    coalesced_total      INTEGER NOT NULL DEFAULT 0 CHECK (coalesced_total >= 0),
    PRIMARY KEY (project_id, trigger_id),
    FOREIGN KEY (project_id, trigger_id) REFERENCES triggers (project_id, trigger_id)
) STRICT;

-- A round's ordered scan of active rows: uninitialised (-1) first, then by cursor.
CREATE INDEX trigger_schedules_due_idx ON trigger_schedules
    (coalesce(next_fire_at_ms, -1), project_id, trigger_id) WHERE active = 1;

CREATE TABLE runs (
    run_id                 TEXT PRIMARY KEY,
    project_id             TEXT NOT NULL,
    trigger_id             TEXT NOT NULL,
    trigger_revision       INTEGER NOT NULL,
    task_id                TEXT NOT NULL,
    task_revision          INTEGER NOT NULL,
    execution_revision_id  TEXT NOT NULL,
    scheduled_for_ms       INTEGER NOT NULL,
    idempotency_key        TEXT NOT NULL UNIQUE,
    state                  TEXT NOT NULL CHECK (state IN ('queued', 'dispatching', 'running',
                               'succeeded', 'failed', 'cancelled')),
    owner                  TEXT NOT NULL CHECK (owner IN ('runtime')),
    queued_at_ms           INTEGER,
    cancel_requested       INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    created_at_ms          INTEGER NOT NULL,
    admitted_by_owner      TEXT NOT NULL,
    admitted_claim_token   TEXT NOT NULL,
    admitted_claim_version INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_trigger_idx ON runs (project_id, trigger_id, scheduled_for_ms);

CREATE TABLE attempts (
    attempt_id     TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    attempt_no     INTEGER NOT NULL CHECK (attempt_no >= 1),
    executor_kind  TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('claimed', 'dispatching', 'running',
                       'succeeded', 'failed', 'lost')),
    worker_id      TEXT,
    session_id     TEXT,
    lease_id       TEXT,
    offer_id       TEXT,
    callback_token TEXT,
    started_at_ms  INTEGER,
    result         TEXT,
    error          TEXT,
    created_at_ms  INTEGER NOT NULL,
    UNIQUE (run_id, attempt_no)
) STRICT;

CREATE TABLE run_events (
    event_id TEXT PRIMARY KEY,
    run_id   TEXT NOT NULL REFERENCES runs (run_id),
    seq      INTEGER NOT NULL CHECK (seq >= 1),
    type     TEXT NOT NULL CHECK (type IN ('run.created', 'run.queued', 'run.dispatching',
                 'run.running', 'run.succeeded', 'run.failed', 'run.cancelled',
                 'run.recovery_marked')),
    at_ms    INTEGER NOT NULL,
    actor    TEXT NOT NULL,
    UNIQUE (run_id, seq)
) STRICT;

CREATE TABLE capability (
    name    TEXT PRIMARY KEY,
    version INTEGER NOT NULL
) STRICT;
INSERT INTO capability (name, version) VALUES ('qlsched.edge_scheduler', 1);
