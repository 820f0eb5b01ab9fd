-- 0012: the dashboard's reads (`qlsched ui`). Its runs page filters by state, newest first,
-- and its overview counts the Runs that failed in the last hour: without an index both walk
-- every Run of the history. With (state, created_at_ms, run_id) each reads only the entries
-- it shows, in the order it shows them (run_id breaks ties of one millisecond: the page key).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

CREATE INDEX runs_state_created_idx ON qlsched.runs (state, created_at_ms, run_id);
