-- 0017: a worker that takes some tasks only reads those tasks' queued Runs
-- (docs/performance.md, Worker).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- A worker that takes only some tasks (an embedded worker's handlers) walked
-- runs_claimable_idx from the oldest queued Run and filtered out every Run of the other
-- tasks: a backlog of a task nobody works made each of its claims read the whole backlog
-- (50,000 queued Runs of another task: 1,900 pages and 11 ms a claim). Here each task's
-- claimable Runs are a range of their own, oldest first. The cost: one more index entry
-- per queued Run.
CREATE INDEX runs_task_claimable_idx ON qlsched.runs
    (project_id, task_id, (COALESCE(retry_at_ms, queued_at_ms)), run_id) WHERE state = 'queued';
