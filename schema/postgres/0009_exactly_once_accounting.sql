-- 0009: every occurrence in one bucket, and nothing retried forever in silence
-- (docs/contract.md §3 "Accounting", §10 "Pause holds requests").
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- Per schedule row:
-- `decided_from_ms`: the first occurrence cron decided for this revision (set with the
--   cursor when it leaves NULL, cleared with it by a re-publish). From it to the cursor,
--   every occurrence is a Run, skipped, coalesced or paused: the accounting's window, and
--   what tells a backfill which of its occurrences cron had already counted.
-- `already_admitted_total`: cron Fires whose key another path (a backfill) had already
--   admitted; the cursor moved past them and the Run that holds the key is their bucket.
-- `backfilled_total`: occurrences cron had counted as not run (skipped, coalesced or
--   paused) that a backfill then admitted: counted in both, so the sum subtracts them.
-- `failures`, `last_failure`, `last_failure_at_ms`: the same row failing again and again
--   (an admit that cannot commit, a spec that does not verify) shows as stuck with its
--   reason, instead of a retry loop nobody sees. Reset by the next admit.
ALTER TABLE qlsched.trigger_schedules
    ADD COLUMN decided_from_ms bigint,
    ADD COLUMN already_admitted_total bigint NOT NULL DEFAULT 0
        CHECK (already_admitted_total >= 0),
    ADD COLUMN backfilled_total bigint NOT NULL DEFAULT 0 CHECK (backfilled_total >= 0),
    ADD COLUMN failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    ADD COLUMN last_failure text CHECK (last_failure ~ '^[a-z0-9_:]{1,80}$'),
    ADD COLUMN last_failure_at_ms bigint;

-- Rows that already had a cursor: cron decided from it on (what came before is unknown).
UPDATE qlsched.trigger_schedules SET decided_from_ms = next_fire_at_ms
 WHERE next_fire_at_ms IS NOT NULL;

-- The claim's unclaimed rows in two indexes instead of one: due rows (by due time) and
-- uninitialised rows (by key), so the claim can give each its share of the budget and
-- still walk each in order without a sort. Same name and key for the due rows' index.
DROP INDEX qlsched.trigger_schedules_claim_idx;
CREATE INDEX trigger_schedules_claim_idx ON qlsched.trigger_schedules
    ((COALESCE(due_at_ms, -1)), project_id, trigger_id)
    WHERE active AND claim_token IS NULL AND due_at_ms IS NOT NULL;
CREATE INDEX trigger_schedules_fresh_idx ON qlsched.trigger_schedules (project_id, trigger_id)
    WHERE active AND claim_token IS NULL AND due_at_ms IS NULL;

-- Stuck rows for status, check and metrics: a small partial index, empty when all is well.
CREATE INDEX trigger_schedules_failing_idx ON qlsched.trigger_schedules (project_id, trigger_id)
    WHERE failures > 0;

-- Per request:
-- `next_ms`: a backfill's next occurrence to admit (NULL: not known yet, at most from_ms).
--   The claim takes a backfill only while that occurrence lies before the cron cursor, so a
--   backfill that must wait for cron holds no claim slot.
-- `failures`, `last_failure`: the same request failing again and again is refused with
--   its reason after a bound, never retried forever.
ALTER TABLE qlsched.control_requests
    ADD COLUMN next_ms bigint,
    ADD COLUMN failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    ADD COLUMN last_failure text CHECK (last_failure ~ '^[a-z0-9_:]{1,80}$');

INSERT INTO qlsched.capability (name, version) VALUES ('qlsched.accounting', 1);

-- The runtime writes what its decisions and failures change; the admin records a
-- backfill's first occurrence and keeps decided_from_ms right on publish and resume (its
-- table-wide UPDATE on trigger_schedules already covers it).
GRANT UPDATE (decided_from_ms, already_admitted_total, backfilled_total, failures,
    last_failure, last_failure_at_ms) ON qlsched.trigger_schedules TO qlsched_runtime;
GRANT UPDATE (next_ms, failures, last_failure) ON qlsched.control_requests TO qlsched_runtime;
GRANT INSERT (next_ms) ON qlsched.control_requests TO qlsched_admin;
