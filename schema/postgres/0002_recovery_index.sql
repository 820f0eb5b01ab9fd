-- 0002: startup recovery reads only live work. Terminal Attempts (succeeded, failed, lost)
-- are the history, which only grows; recovery walks this partial index instead, so its
-- cost follows the non-terminal Attempts, not everything ever admitted.
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

CREATE INDEX attempts_live_idx ON qlsched.attempts (attempt_id)
    WHERE state IN ('claimed', 'dispatching', 'running');
