-- 0004: `status` shows the most recent Runs (ORDER BY created_at_ms DESC LIMIT n). Without an
-- index it sorted every Run, a cost that grew with the history; this index is read backwards
-- for the first n, whatever the history's size.
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

CREATE INDEX runs_created_idx ON qlsched.runs (created_at_ms);
