-- 0001: the cluster scheduler (ADR-0105): specs, schedules with the four-part lease fence,
-- runs, attempts, events, the recovery marks, the capability, and the exact grants.
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

CREATE TABLE qlsched.projects (
    project_id    text PRIMARY KEY CHECK (project_id ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    state         text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
    revision      bigint NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL
);

CREATE TABLE qlsched.tasks (
    project_id     text NOT NULL REFERENCES qlsched.projects (project_id),
    task_id        text NOT NULL CHECK (task_id ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    revision       bigint NOT NULL CHECK (revision >= 1),
    content_digest text NOT NULL CHECK (content_digest ~ '^[0-9a-f]{64}$'),
    command        text NOT NULL,
    created_at_ms  bigint NOT NULL,
    updated_at_ms  bigint NOT NULL,
    PRIMARY KEY (project_id, task_id)
);

-- What a worker will execute, pinned by id; the digest is SHA-256 (hex) over the UTF-8
-- bytes of the canonical JSON payload and is re-computed at every admit.
CREATE TABLE qlsched.execution_revisions (
    execution_revision_id uuid PRIMARY KEY,
    project_id            text NOT NULL,
    task_id               text NOT NULL,
    task_revision         bigint NOT NULL CHECK (task_revision >= 1),
    executor_kind         text NOT NULL CHECK (executor_kind ~ '^[a-z][a-z_]{0,62}$'),
    payload               text NOT NULL,
    digest                text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    created_at_ms         bigint NOT NULL,
    FOREIGN KEY (project_id, task_id) REFERENCES qlsched.tasks (project_id, task_id),
    UNIQUE (project_id, task_id, task_revision)
);

CREATE TABLE qlsched.triggers (
    project_id            text NOT NULL REFERENCES qlsched.projects (project_id),
    trigger_id            text NOT NULL CHECK (trigger_id ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    revision              bigint NOT NULL CHECK (revision >= 1),
    kind                  text NOT NULL DEFAULT 'cron' CHECK (kind IN ('cron')),
    enabled               boolean NOT NULL DEFAULT true,
    cron                  text NOT NULL CHECK (pg_catalog.length(cron) BETWEEN 1 AND 200),
    timezone              text NOT NULL DEFAULT 'UTC'
                              CHECK (pg_catalog.length(timezone) BETWEEN 1 AND 64),
    misfire_policy        text NOT NULL DEFAULT 'skip'
                              CHECK (misfire_policy IN ('skip', 'fire_once')),
    misfire_grace_ms      bigint NOT NULL DEFAULT 60000
                              CHECK (misfire_grace_ms BETWEEN 0 AND 86400000),
    task_id               text NOT NULL,
    task_revision         bigint NOT NULL CHECK (task_revision >= 1),
    execution_revision_id uuid NOT NULL
                              REFERENCES qlsched.execution_revisions (execution_revision_id),
    content_digest        text NOT NULL CHECK (content_digest ~ '^[0-9a-f]{64}$'),
    created_at_ms         bigint NOT NULL,
    updated_at_ms         bigint NOT NULL,
    PRIMARY KEY (project_id, trigger_id),
    -- The idempotency key (ql3:cron:v1:<triggerId>:<revision>:<scheduledFor>) names the
    -- trigger, not its project: a trigger id is unique across projects, or two projects'
    -- occurrences would collide on runs_idempotency_key_key and one would be lost.
    CONSTRAINT triggers_trigger_id_key UNIQUE (trigger_id),
    FOREIGN KEY (project_id, task_id) REFERENCES qlsched.tasks (project_id, task_id)
);

-- One row per trigger head. `active` (project active, trigger enabled, revision current) is
-- kept by publish so the claim can walk one partial index; admit re-verifies the real rows.
CREATE TABLE qlsched.trigger_schedules (
    project_id           text NOT NULL,
    trigger_id           text NOT NULL,
    trigger_revision     bigint NOT NULL CHECK (trigger_revision >= 1),
    active               boolean NOT NULL DEFAULT false,
    next_fire_at_ms      bigint,
    last_scheduled_at_ms bigint,
    state_version        bigint NOT NULL DEFAULT 0 CHECK (state_version >= 0),
    claim_owner          text CHECK (pg_catalog.length(claim_owner) BETWEEN 1 AND 200),
    claim_token          uuid,
    claim_version        bigint NOT NULL DEFAULT 0 CHECK (claim_version >= 0),
    claim_expires_at_ms  bigint,
    updated_at_ms        bigint NOT NULL,
    skipped_total        bigint NOT NULL DEFAULT 0 CHECK (skipped_total >= 0),
    coalesced_total      bigint NOT NULL DEFAULT 0 CHECK (coalesced_total >= 0),
    PRIMARY KEY (project_id, trigger_id),
    FOREIGN KEY (project_id, trigger_id) REFERENCES qlsched.triggers (project_id, trigger_id),
    -- a claim is all three parts or none
    CHECK ((claim_token IS NULL) = (claim_owner IS NULL)
           AND (claim_token IS NULL) = (claim_expires_at_ms IS NULL))
);

-- The claim's ordered scan: unclaimed active rows by (cursor NULLS FIRST, project, trigger).
-- Validly claimed rows are not in it, so a table whose due rows are mostly claimed is not
-- walked; expired claims have their own small index.
CREATE INDEX trigger_schedules_claim_idx ON qlsched.trigger_schedules
    ((COALESCE(next_fire_at_ms, -1)), project_id, trigger_id)
    WHERE active AND claim_token IS NULL;
CREATE INDEX trigger_schedules_expiry_idx ON qlsched.trigger_schedules (claim_expires_at_ms)
    WHERE active AND claim_token IS NOT NULL;

CREATE TABLE qlsched.runs (
    run_id                 uuid PRIMARY KEY,
    project_id             text NOT NULL,
    trigger_id             text NOT NULL,
    trigger_revision       bigint NOT NULL,
    task_id                text NOT NULL,
    task_revision          bigint NOT NULL,
    execution_revision_id  uuid NOT NULL,
    scheduled_for_ms       bigint NOT NULL,
    idempotency_key        text NOT NULL,
    state                  text NOT NULL CHECK (state IN ('queued', 'dispatching', 'running',
                               'succeeded', 'failed', 'cancelled')),
    owner                  text NOT NULL CHECK (owner IN ('runtime')),
    queued_at_ms           bigint,
    cancel_requested       boolean NOT NULL DEFAULT false,
    created_at_ms          bigint NOT NULL,
    admitted_by_owner      text NOT NULL,
    admitted_claim_token   uuid NOT NULL,
    admitted_claim_version bigint NOT NULL,
    CONSTRAINT runs_idempotency_key_key UNIQUE (idempotency_key)
);
CREATE INDEX runs_trigger_idx ON qlsched.runs (project_id, trigger_id, scheduled_for_ms);

CREATE TABLE qlsched.attempts (
    attempt_id     uuid PRIMARY KEY,
    run_id         uuid NOT NULL REFERENCES qlsched.runs (run_id),
    attempt_no     integer NOT NULL CHECK (attempt_no >= 1),
    executor_kind  text NOT NULL,
    state          text NOT NULL CHECK (state IN ('claimed', 'dispatching', 'running',
                       'succeeded', 'failed', 'lost')),
    worker_id      text,
    session_id     text,
    lease_id       text,
    offer_id       text,
    callback_token text,
    started_at_ms  bigint,
    result         text,
    error          text,
    created_at_ms  bigint NOT NULL,
    UNIQUE (run_id, attempt_no)
);

CREATE TABLE qlsched.run_events (
    event_id uuid PRIMARY KEY,
    run_id   uuid NOT NULL REFERENCES qlsched.runs (run_id),
    seq      integer NOT NULL CHECK (seq >= 1),
    type     text NOT NULL CHECK (type IN ('run.created', 'run.queued', 'run.dispatching',
                 'run.running', 'run.succeeded', 'run.failed', 'run.cancelled',
                 'run.recovery_marked')),
    at_ms    bigint NOT NULL,
    actor    text NOT NULL,
    UNIQUE (run_id, seq)
);

-- Startup recovery marks non-pristine runtime-owned Attempts here (fail closed); the
-- Attempt itself is not rewritten: placement/dispatch keeps authority over it.
CREATE TABLE qlsched.recovery_marks (
    attempt_id   uuid PRIMARY KEY REFERENCES qlsched.attempts (attempt_id),
    run_id       uuid NOT NULL REFERENCES qlsched.runs (run_id),
    reason       text NOT NULL CHECK (reason ~ '^[a-z_]{1,40}$'),
    marked_at_ms bigint NOT NULL,
    marked_by    text NOT NULL
);

CREATE TABLE qlsched.capability (
    name    text PRIMARY KEY,
    version integer NOT NULL
);
INSERT INTO qlsched.capability (name, version) VALUES ('qlsched.cluster_scheduler', 1);

-- Grants: exactly docs/contract.md §4, nothing to PUBLIC. Readiness compares the catalog to this.
GRANT USAGE ON SCHEMA qlsched TO qlsched_admin, qlsched_runtime, qlsched_observer;

GRANT SELECT, INSERT, UPDATE ON qlsched.projects, qlsched.tasks, qlsched.execution_revisions,
    qlsched.triggers, qlsched.trigger_schedules TO qlsched_admin;

GRANT SELECT ON qlsched.projects, qlsched.tasks, qlsched.execution_revisions, qlsched.triggers,
    qlsched.trigger_schedules, qlsched.capability, qlsched.schema_migrations TO qlsched_runtime;
GRANT UPDATE (next_fire_at_ms, last_scheduled_at_ms, state_version, claim_owner, claim_token,
    claim_version, claim_expires_at_ms, updated_at_ms, skipped_total, coalesced_total)
    ON qlsched.trigger_schedules TO qlsched_runtime;
GRANT SELECT, INSERT ON qlsched.runs, qlsched.attempts, qlsched.run_events,
    qlsched.recovery_marks TO qlsched_runtime;

GRANT SELECT ON qlsched.projects, qlsched.tasks, qlsched.execution_revisions, qlsched.triggers,
    qlsched.trigger_schedules, qlsched.runs, qlsched.attempts, qlsched.run_events,
    qlsched.recovery_marks, qlsched.capability, qlsched.schema_migrations TO qlsched_observer;
