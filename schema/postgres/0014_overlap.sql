-- 0014: overlap policy and start deadline per trigger (docs/contract.md §13).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- The trigger's overlap policy and start deadline, part of its content digest only when not
-- the default (publish computes it), so an upgraded trigger keeps its revision.
ALTER TABLE qlsched.triggers
    ADD COLUMN overlap text NOT NULL DEFAULT 'allow'
        CONSTRAINT triggers_overlap_check
        CHECK (overlap IN ('allow', 'skip', 'buffer_one', 'cancel_other')),
    ADD COLUMN start_deadline_ms bigint
        CONSTRAINT triggers_start_deadline_ms_check
        CHECK (start_deadline_ms BETWEEN 1 AND 604800000);

-- `held`: a Run buffer_one admitted while another of its trigger was unfinished; no worker
-- claims it (the claim reads `queued` only) until a release makes it `queued`. `start_by_ms`:
-- a queued Run no worker started by then (database time) is cancelled, reason
-- `start_deadline`; set when the Run becomes queued (admitted, or released), never for a
-- retry (its Run was started). `cancel_reason`: who ended a Run that never finished its job
-- (NULL: the admin's cancel, or a worker's).
ALTER TABLE qlsched.runs
    ADD COLUMN start_by_ms bigint,
    ADD COLUMN cancel_reason text
        CONSTRAINT runs_cancel_reason_check
        CHECK (cancel_reason IN ('start_deadline', 'overlap')),
    DROP CONSTRAINT runs_state_check,
    ADD CONSTRAINT runs_state_check CHECK (state IN ('held', 'queued', 'dispatching',
        'running', 'succeeded', 'failed', 'cancelled'));

ALTER TABLE qlsched.run_events
    DROP CONSTRAINT run_events_type_check,
    ADD CONSTRAINT run_events_type_check CHECK (type IN ('run.created', 'run.queued',
        'run.dispatching', 'run.running', 'run.succeeded', 'run.failed', 'run.cancelled',
        'run.recovery_marked', 'run.cancel_requested', 'run.attempt_failed',
        'run.attempt_lost', 'run.held', 'run.released'));

-- The accounting's buckets for occurrences without a Run of their own (overlap `skip`, or
-- beyond buffer_one's one) and for Runs a start deadline cancelled.
ALTER TABLE qlsched.trigger_schedules
    ADD COLUMN overlap_skipped_total bigint NOT NULL DEFAULT 0
        CHECK (overlap_skipped_total >= 0),
    ADD COLUMN deadline_cancelled_total bigint NOT NULL DEFAULT 0
        CHECK (deadline_cancelled_total >= 0);

-- Trigger-now and backfill requests follow the trigger's overlap policy unless recorded with
-- `overlap = 'allow'` (NULL: the trigger's); the occurrences a request's policy skipped are
-- counted on the request (admitted + already_admitted + overlap_skipped = its total).
ALTER TABLE qlsched.control_requests
    ADD COLUMN overlap text CONSTRAINT control_requests_overlap_check CHECK (overlap = 'allow'),
    ADD COLUMN overlap_skipped bigint NOT NULL DEFAULT 0 CHECK (overlap_skipped >= 0);
GRANT INSERT (overlap) ON qlsched.control_requests TO qlsched_admin;
GRANT UPDATE (overlap_skipped) ON qlsched.control_requests TO qlsched_runtime;

-- A trigger's unfinished Runs, read by an admit under a policy other than `allow` (never
-- under `allow`: the default costs nothing). Finished Runs leave the index, so the read
-- follows the unfinished Runs of one trigger, never its history.
CREATE INDEX runs_unfinished_idx ON qlsched.runs (project_id, trigger_id, state)
    WHERE state IN ('held', 'queued', 'running');
-- Held Runs to release, by trigger.
CREATE INDEX runs_held_idx ON qlsched.runs (project_id, trigger_id, created_at_ms)
    WHERE state = 'held';
-- Unstarted queued Runs with a deadline, soonest first: the deadline pass reads only these.
CREATE INDEX runs_start_by_idx ON qlsched.runs (start_by_ms)
    WHERE state = 'queued' AND started_at_ms IS NULL AND start_by_ms IS NOT NULL;

-- The runtime decides overlap in its admits, cancels Runs past their start deadline (an
-- unstarted Run and its pristine Attempt are still its own), releases held Runs, and writes
-- their events (numbered after the Run's last: it reads the numbers, not the events). It
-- already reads triggers, schedule rows and Runs whole.
GRANT UPDATE (state, queued_at_ms, start_by_ms, cancel_requested, cancel_reason,
    finished_at_ms) ON qlsched.runs TO qlsched_runtime;
GRANT UPDATE (state, result, finished_at_ms) ON qlsched.attempts TO qlsched_runtime;
GRANT SELECT (run_id, seq) ON qlsched.run_events TO qlsched_runtime;
GRANT UPDATE (overlap_skipped_total, deadline_cancelled_total)
    ON qlsched.trigger_schedules TO qlsched_runtime;

-- The worker releases the held Run of a trigger whose Run it finished (the runtime's pass
-- releases any it missed), with the start deadline the trigger sets.
GRANT SELECT (start_by_ms) ON qlsched.runs TO qlsched_worker;
GRANT UPDATE (queued_at_ms, start_by_ms) ON qlsched.runs TO qlsched_worker;
GRANT SELECT (project_id, trigger_id, start_deadline_ms) ON qlsched.triggers
    TO qlsched_worker;

