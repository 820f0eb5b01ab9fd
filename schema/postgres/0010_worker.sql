-- 0010: the worker (docs/contract.md §13): a second authority beside the scheduler, with its
-- own role (qlsched_worker, created by the bootstrap) and its own lease on Attempts. The
-- scheduler's authority still ends at a queued Run with its pristine Attempt.
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- An Attempt a worker holds: `lease_id` (existing column) is its lease token, issued by the
-- claim; `lease_expires_at_ms` is by the database clock. Heartbeat and finish are fenced by
-- (attempt, token, not expired). The outcome: exit code, a bounded tail of the job's output.
ALTER TABLE qlsched.attempts
    ADD COLUMN lease_expires_at_ms bigint,
    ADD COLUMN heartbeat_at_ms bigint,
    ADD COLUMN finished_at_ms bigint,
    ADD COLUMN exit_code integer,
    ADD COLUMN output_tail text CHECK (pg_catalog.length(output_tail) <= 16384),
    DROP CONSTRAINT attempts_state_check,
    ADD CONSTRAINT attempts_state_check CHECK (state IN ('claimed', 'dispatching', 'running',
        'succeeded', 'failed', 'lost', 'cancelled'));

-- The Run's lifecycle: started (first Attempt claimed), finished (terminal state), and the
-- time a retry becomes claimable (NULL: from queued_at_ms, as admission left it).
ALTER TABLE qlsched.runs
    ADD COLUMN started_at_ms bigint,
    ADD COLUMN finished_at_ms bigint,
    ADD COLUMN retry_at_ms bigint;

ALTER TABLE qlsched.run_events
    DROP CONSTRAINT run_events_type_check,
    ADD CONSTRAINT run_events_type_check CHECK (type IN ('run.created', 'run.queued',
        'run.dispatching', 'run.running', 'run.succeeded', 'run.failed', 'run.cancelled',
        'run.recovery_marked', 'run.cancel_requested', 'run.attempt_failed',
        'run.attempt_lost'));

-- The worker's claim walks queued Runs oldest first (a retry by its back-off); finished Runs
-- are not in the index, so its cost follows the queue, never the history.
CREATE INDEX runs_claimable_idx ON qlsched.runs
    ((COALESCE(retry_at_ms, queued_at_ms)), run_id) WHERE state = 'queued';
-- Leases to reap: only Attempts a worker holds.
CREATE INDEX attempts_lease_idx ON qlsched.attempts (lease_expires_at_ms)
    WHERE state = 'running';
-- `status` and `runs`: a trigger's latest Runs, and counts by state.
CREATE INDEX runs_state_idx ON qlsched.runs (state, finished_at_ms);

-- What a worker may read of a task: the payload (command and policy) of Runs that are
-- queued or running, never of finished ones or of revisions no Run uses. A view with the
-- owner's rights, so execution_revisions.payload itself stays closed to the worker.
CREATE VIEW qlsched.worker_payloads AS
SELECT r.run_id, e.payload,
       COALESCE((e.payload::jsonb ->> 'max_attempts')::integer, 1) AS max_attempts,
       COALESCE((e.payload::jsonb ->> 'retry_backoff_ms')::bigint, 0) AS retry_backoff_ms
  FROM qlsched.runs AS r
  JOIN qlsched.execution_revisions AS e ON e.execution_revision_id = r.execution_revision_id
 WHERE r.state IN ('queued', 'running');

INSERT INTO qlsched.capability (name, version) VALUES ('qlsched.worker', 1);

-- The worker: claims queued Runs, writes the worker-side Attempt fields, the Run's
-- lifecycle state and its events. No schedule, trigger, request or fence column; the
-- admission fence of a Run (admitted_*) is not even readable.
GRANT USAGE ON SCHEMA qlsched TO qlsched_worker;
GRANT SELECT ON qlsched.capability, qlsched.schema_migrations, qlsched.catalog_reference,
    qlsched.worker_payloads TO qlsched_worker;
GRANT SELECT (run_id, project_id, trigger_id, trigger_revision, task_id, task_revision,
    execution_revision_id, scheduled_for_ms, idempotency_key, state, queued_at_ms,
    cancel_requested, created_at_ms, started_at_ms, finished_at_ms, retry_at_ms)
    ON qlsched.runs TO qlsched_worker;
GRANT UPDATE (state, started_at_ms, finished_at_ms, retry_at_ms) ON qlsched.runs
    TO qlsched_worker;
GRANT SELECT (attempt_id, run_id, attempt_no, executor_kind, state, worker_id, session_id,
    lease_id, offer_id, started_at_ms, result, error, created_at_ms, lease_expires_at_ms,
    heartbeat_at_ms, finished_at_ms, exit_code) ON qlsched.attempts TO qlsched_worker;
GRANT UPDATE (state, worker_id, session_id, lease_id, started_at_ms, result, error,
    lease_expires_at_ms, heartbeat_at_ms, finished_at_ms, exit_code, output_tail)
    ON qlsched.attempts TO qlsched_worker;
GRANT INSERT (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms)
    ON qlsched.attempts TO qlsched_worker;
GRANT SELECT (run_id, seq) ON qlsched.run_events TO qlsched_worker;
GRANT INSERT ON qlsched.run_events TO qlsched_worker;

-- The admin cancels (audited in schedule_actions): a queued Run and its pristine Attempt
-- at once; a running one by asking its worker (cancel_requested).
GRANT SELECT (run_id, project_id, trigger_id, trigger_revision, state, cancel_requested)
    ON qlsched.runs TO qlsched_admin;
GRANT UPDATE (state, cancel_requested, finished_at_ms) ON qlsched.runs TO qlsched_admin;
GRANT SELECT (attempt_id, run_id, attempt_no, state) ON qlsched.attempts TO qlsched_admin;
GRANT UPDATE (state, finished_at_ms, result) ON qlsched.attempts TO qlsched_admin;
GRANT SELECT (run_id, seq) ON qlsched.run_events TO qlsched_admin;
GRANT INSERT ON qlsched.run_events TO qlsched_admin;

-- The observer sees the outcome (not the output tail: a job may print what it should not).
GRANT SELECT (lease_expires_at_ms, heartbeat_at_ms, finished_at_ms, exit_code)
    ON qlsched.attempts TO qlsched_observer;
