-- The Edge bench's reads and its burst, on an Edge (SQLite) file.

-- name: edge_bench_make_due
-- The bench's burst: every active cursor set to ?1 (in the past), as after a due tick.
UPDATE trigger_schedules SET next_fire_at_ms = ?1, state_version = state_version + 1
 WHERE active = 1;

-- name: edge_bench_uninitialised
SELECT count(*) FROM trigger_schedules WHERE active = 1 AND next_fire_at_ms IS NULL;

-- name: edge_bench_runs_progress
-- Runs so far, cheaply while a replica writes (runs is append-only: its last rowid).
SELECT coalesce(max(rowid), 0) FROM runs;

-- name: edge_bench_runs_span
-- Runs so far, and the first and last admission times.
SELECT count(*), min(created_at_ms), max(created_at_ms) FROM runs;

-- name: edge_bench_duplicates
SELECT count(*) FROM (SELECT 1 FROM runs GROUP BY trigger_id, scheduled_for_ms
                       HAVING count(*) > 1);

-- name: edge_bench_malformed
-- Runs without exactly one pristine claimed Attempt and the events run.created, run.queued.
SELECT count(*) FROM runs AS r
 WHERE (SELECT count(*) FROM attempts AS a
         WHERE a.run_id = r.run_id AND a.state = 'claimed' AND a.worker_id IS NULL
           AND a.started_at_ms IS NULL AND a.result IS NULL AND a.error IS NULL) <> 1
    OR (SELECT count(*) FROM attempts AS a WHERE a.run_id = r.run_id) <> 1
    OR (SELECT group_concat(type, ',') FROM
          (SELECT type FROM run_events WHERE run_id = r.run_id ORDER BY seq))
       IS NOT 'run.created,run.queued';

-- name: edge_bench_lags
-- Schedule lag of the Runs due in [?1, ?2): created_at_ms - scheduled_for_ms, ms.
SELECT trigger_id, scheduled_for_ms, created_at_ms - scheduled_for_ms FROM runs
 WHERE scheduled_for_ms >= ?1 AND scheduled_for_ms < ?2;
