-- name: recovery_candidates
-- The recovery source (docs/contract.md §5): every runtime-owned, non-terminal Attempt except the
-- pristine ones, with the first reason it is not pristine. Pristine = parent Run queued
-- (or held by its overlap policy, 0014: queued once released), not cancelled, queued_at_ms set; the Attempt is the latest of its Run, `claimed`,
-- `remote_worker`, and every worker/session/lease/offer/callback/start/result/error field
-- still NULL. Anything else stays a candidate (fail closed). Already-marked ones are left out.
-- Reads only non-terminal Attempts (attempts_live_idx), each checked for a newer Attempt of
-- its Run by the (run_id, attempt_no) key: the cost follows live work, never the history.
-- An Attempt a worker holds under a lease (running, with a lease expiry: migration 0010) is
-- the worker's, expired or not: workers mark it lost, never the scheduler.
SELECT a.attempt_id, a.run_id,
       CASE
         WHEN EXISTS (SELECT 1 FROM qlsched.attempts AS n
                       WHERE n.run_id = a.run_id AND n.attempt_no > a.attempt_no)
           THEN 'newer_attempt'
         WHEN a.state <> 'claimed' THEN 'attempt_' || a.state
         WHEN r.state NOT IN ('queued', 'held') THEN 'run_' || r.state
         WHEN r.cancel_requested THEN 'cancel_requested'
         WHEN r.queued_at_ms IS NULL THEN 'queued_at_missing'
         WHEN a.executor_kind <> 'remote_worker' THEN 'executor_kind'
         WHEN a.worker_id IS NOT NULL THEN 'worker_id'
         WHEN a.session_id IS NOT NULL THEN 'session_id'
         WHEN a.lease_id IS NOT NULL THEN 'lease_id'
         WHEN a.offer_id IS NOT NULL THEN 'offer_id'
         WHEN a.callback_token IS NOT NULL THEN 'callback_token'
         WHEN a.started_at_ms IS NOT NULL THEN 'started_at_ms'
         WHEN a.result IS NOT NULL THEN 'result'
         WHEN a.error IS NOT NULL THEN 'error'
       END AS reason
  FROM qlsched.attempts AS a
  JOIN qlsched.runs AS r ON r.run_id = a.run_id
 WHERE a.state IN ('claimed', 'dispatching', 'running')
   AND r.owner = 'runtime'
   AND NOT EXISTS (SELECT 1 FROM qlsched.recovery_marks AS m WHERE m.attempt_id = a.attempt_id)
   AND NOT (a.state = 'running' AND a.lease_id IS NOT NULL AND a.lease_expires_at_ms IS NOT NULL)
   AND NOT (a.state = 'claimed' AND r.state IN ('queued', 'held')
            AND NOT r.cancel_requested AND r.queued_at_ms IS NOT NULL
            AND a.executor_kind = 'remote_worker'
            AND a.worker_id IS NULL AND a.session_id IS NULL AND a.lease_id IS NULL
            AND a.offer_id IS NULL AND a.callback_token IS NULL AND a.started_at_ms IS NULL
            AND a.result IS NULL AND a.error IS NULL
            AND NOT EXISTS (SELECT 1 FROM qlsched.attempts AS n
                             WHERE n.run_id = a.run_id AND n.attempt_no > a.attempt_no))
 ORDER BY a.attempt_id;

-- name: mark_for_recovery
-- Mark candidates (arrays $1 attempt ids, $2 run ids, $3 reasons) by replica $4, once.
INSERT INTO qlsched.recovery_marks (attempt_id, run_id, reason, marked_at_ms, marked_by)
SELECT m.attempt_id, m.run_id, m.reason,
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint, $4
  FROM ROWS FROM (pg_catalog.unnest($1::uuid[]), pg_catalog.unnest($2::uuid[]),
                  pg_catalog.unnest($3::text[])) AS m(attempt_id, run_id, reason)
ON CONFLICT (attempt_id) DO NOTHING;
