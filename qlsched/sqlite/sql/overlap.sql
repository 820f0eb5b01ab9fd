-- The overlap policy and the start deadline on the Edge file (docs/contract.md §13), in the
-- runner's transactions. Events are numbered after the Run's last.

-- name: runs_unfinished
-- A trigger's unfinished Runs by kind, through their partial index (never its history):
-- (queued or running, held). ?1 project, ?2 trigger.
SELECT coalesce(sum(state IN ('queued', 'running')), 0), coalesce(sum(state = 'held'), 0)
  FROM runs
 WHERE project_id = ?1 AND trigger_id = ?2 AND state IN ('held', 'queued', 'running');

-- name: count_overlap_skipped
-- A cron occurrence the policy gave no Run. ?1 project, ?2 trigger.
UPDATE trigger_schedules SET overlap_skipped_total = overlap_skipped_total + 1
 WHERE project_id = ?1 AND trigger_id = ?2;

-- name: others_unfinished
-- The trigger's unfinished Runs not yet asked to cancel (cancel_other: the caller keeps the
-- new ones). ?1 project, ?2 trigger.
SELECT run_id FROM runs
 WHERE project_id = ?1 AND trigger_id = ?2 AND state IN ('held', 'queued', 'running')
   AND cancel_requested = 0;

-- name: run_cancel
-- A held or queued Run ends `cancelled` at once; a running one is asked to (its dispatcher
-- reads cancel_requested). ?1 run, ?2 reason, ?3 now ms. Returns the state it now has.
UPDATE runs
   SET state = CASE WHEN state = 'running' THEN 'running' ELSE 'cancelled' END,
       cancel_requested = 1, cancel_reason = ?2,
       finished_at_ms = CASE WHEN state = 'running' THEN NULL ELSE ?3 END
 WHERE run_id = ?1 AND state IN ('held', 'queued', 'running')
RETURNING state;

-- name: attempt_cancel_pristine
-- The pristine Attempt of a Run cancelled before it started. ?1 run, ?2 reason, ?3 now ms.
UPDATE attempts SET state = 'cancelled', result = ?2, finished_at_ms = ?3
 WHERE run_id = ?1 AND state = 'claimed' AND worker_id IS NULL;

-- name: event_next
-- One event after the Run's last. ?1 event id, ?2 run, ?3 type, ?4 now ms, ?5 actor.
INSERT INTO run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT ?1, ?2, max(seq) + 1, ?3, ?4, ?5 FROM run_events WHERE run_id = ?2;

-- name: runs_past_deadline
-- Queued Runs nobody started by their deadline, soonest first. ?1 now ms, ?2 limit.
SELECT run_id, project_id, trigger_id FROM runs
 WHERE state = 'queued' AND started_at_ms IS NULL AND start_by_ms IS NOT NULL
   AND start_by_ms <= ?1
 ORDER BY start_by_ms
 LIMIT ?2;

-- name: run_cancel_unstarted
-- ?1 run, ?2 now ms: cancelled for its start deadline, if nobody started it meanwhile.
UPDATE runs
   SET state = 'cancelled', cancel_reason = 'start_deadline', finished_at_ms = ?2
 WHERE run_id = ?1 AND state = 'queued' AND started_at_ms IS NULL;

-- name: count_deadline_cancelled
-- ?1 project, ?2 trigger.
UPDATE trigger_schedules SET deadline_cancelled_total = deadline_cancelled_total + 1
 WHERE project_id = ?1 AND trigger_id = ?2;

-- name: held_releasable
-- Held Runs whose trigger has nothing queued or running, oldest first. ?1 limit.
SELECT h.run_id, h.project_id, h.trigger_id FROM runs AS h
 WHERE h.state = 'held'
   AND NOT EXISTS (SELECT 1 FROM runs AS u
                    WHERE u.project_id = h.project_id AND u.trigger_id = h.trigger_id
                      AND u.state IN ('queued', 'running'))
 ORDER BY h.created_at_ms, h.run_id
 LIMIT ?1;

-- name: run_release
-- A held Run becomes queued now, with its trigger's start deadline from now. ?1 run,
-- ?2 now ms.
UPDATE runs
   SET state = 'queued', queued_at_ms = ?2,
       start_by_ms = ?2 + (SELECT t.start_deadline_ms FROM triggers AS t
                            WHERE t.project_id = runs.project_id
                              AND t.trigger_id = runs.trigger_id)
 WHERE run_id = ?1 AND state = 'held';

-- name: runs_pass_probe
-- Whether the runs pass has work: a queued Run past its deadline, or a held Run whose
-- trigger has nothing queued or running (a held Run waiting behind a long job is not
-- work: an idle pass takes no write lock). ?1 now ms.
SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND started_at_ms IS NULL
                                    AND start_by_ms IS NOT NULL AND start_by_ms <= ?1)
    OR EXISTS (SELECT 1 FROM runs AS h
                WHERE h.state = 'held'
                  AND NOT EXISTS (SELECT 1 FROM runs AS u
                                   WHERE u.project_id = h.project_id
                                     AND u.trigger_id = h.trigger_id
                                     AND u.state IN ('queued', 'running')));
