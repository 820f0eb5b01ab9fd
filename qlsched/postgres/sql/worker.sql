-- The worker's protocol (docs/contract.md §13), as qlsched_worker. Every statement is one
-- implicit transaction that writes its transition's events with it, in database time.
-- Event numbers are the Run's last plus one, under the Run's row lock; a writer that lost
-- a race for a number gets 23505 (nothing committed) and may send again.

-- name: worker_claim
-- Take up to $3 claimable Runs of any task (queued, back-off over, not asked to cancel,
-- latest Attempt pristine), oldest first through runs_claimable_idx, SKIP LOCKED: each
-- Attempt becomes `running` for worker $1 (session $2) under a fresh lease token expiring
-- $4 ms from the database clock, and the Run becomes `running` with a `run.running` event.
-- Returns each with the payload to execute.
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
),
picked AS (
    SELECT r.run_id
      FROM qlsched.runs AS r
     WHERE r.state = 'queued'
       AND COALESCE(r.retry_at_ms, r.queued_at_ms) <= (SELECT c.now_ms FROM clock AS c)
       -- include: worker_claimable
     ORDER BY COALESCE(r.retry_at_ms, r.queued_at_ms), r.run_id
     LIMIT $3
       FOR UPDATE OF r SKIP LOCKED
),
-- include: worker_take
;

-- name: worker_claim_tasks
-- worker_claim for a worker that takes only the tasks 'project/task' in $5 (an embedded
-- worker's handlers). Each task's claimable Runs are a range of runs_task_claimable_idx,
-- read oldest first under SKIP LOCKED, at most $3 of each, and the oldest $3 of all those are
-- taken. The few a statement locked and did not take (more than one task, each with Runs)
-- are free again at its commit, milliseconds later. Rejected: one walk of
-- runs_claimable_idx filtered by task, which read every older queued Run of the other
-- tasks: a backlog nobody works made each claim read all of it.
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
),
wanted AS (
    SELECT DISTINCT pg_catalog.split_part(k.key, '/', 1) AS project_id,
           pg_catalog.split_part(k.key, '/', 2) AS task_id
      FROM pg_catalog.unnest($5::text[]) AS k(key)
),
picked AS (
    SELECT c.run_id
      FROM wanted AS w
     CROSS JOIN LATERAL (
        SELECT r.run_id, COALESCE(r.retry_at_ms, r.queued_at_ms) AS at_ms
          FROM qlsched.runs AS r
         WHERE r.project_id = w.project_id AND r.task_id = w.task_id
           AND r.state = 'queued'
           AND COALESCE(r.retry_at_ms, r.queued_at_ms) <= (SELECT c.now_ms FROM clock AS c)
           -- include: worker_claimable
         ORDER BY COALESCE(r.retry_at_ms, r.queued_at_ms), r.run_id
         LIMIT $3
           FOR UPDATE OF r SKIP LOCKED
     ) AS c
     ORDER BY c.at_ms, c.run_id
     LIMIT $3
),
-- include: worker_take
;

-- fragment: worker_claimable
-- A queued Run a worker may take, beside its state and back-off: not asked to cancel, and
-- its latest Attempt pristine (the take re-checks the Attempt under its row lock). The
-- latest Attempt is one backward probe of attempts_run_id_attempt_no_key per candidate, in
-- a scalar subquery no plan can turn into a join. Rejected: EXISTS of a pristine Attempt
-- with NOT EXISTS of a later one, which a plan made from statistics of a real history ran
-- as a hash join over every Attempt ever made (a sequential scan of attempts per claim).
AND NOT r.cancel_requested
AND (SELECT a.state = 'claimed' AND a.worker_id IS NULL AND a.lease_id IS NULL
       FROM qlsched.attempts AS a
      WHERE a.run_id = r.run_id
      ORDER BY a.attempt_no DESC
      LIMIT 1)

-- fragment: worker_take
-- Given `clock` and `picked` (the Runs locked for this worker), the claim itself: each
-- pristine Attempt becomes `running` under a fresh lease, its Run `running` with a
-- `run.running` event; the rows returned carry the payload. Each step reaches its rows by
-- key from the one before, and the Runs' update returns its Attempt's columns too, so no
-- two of the statement's row sets are joined (a plan that expects one row from each runs
-- such a join as a nested loop: the square of the claim).
taken AS (
    UPDATE qlsched.attempts AS a
       SET state = 'running', worker_id = $1, session_id = $2,
           lease_id = pg_catalog.gen_random_uuid()::text,
           started_at_ms = c.now_ms, heartbeat_at_ms = c.now_ms,
           lease_expires_at_ms = c.now_ms + $4::bigint
      FROM picked AS p, clock AS c
     WHERE a.run_id = p.run_id AND a.state = 'claimed'
       AND a.worker_id IS NULL AND a.lease_id IS NULL
       AND a.attempt_no = (SELECT pg_catalog.max(n.attempt_no) FROM qlsched.attempts AS n
                            WHERE n.run_id = a.run_id)
 RETURNING a.attempt_id, a.run_id, a.attempt_no, a.lease_id, a.lease_expires_at_ms,
           a.started_at_ms
),
started AS (
    UPDATE qlsched.runs AS r
       SET state = 'running', started_at_ms = COALESCE(r.started_at_ms, t.started_at_ms)
      FROM taken AS t
     WHERE r.run_id = t.run_id
 RETURNING r.run_id, r.project_id, r.task_id, r.trigger_id, r.idempotency_key,
           r.scheduled_for_ms, t.attempt_id, t.attempt_no, t.lease_id, t.lease_expires_at_ms,
           t.started_at_ms
),
events AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.gen_random_uuid(), t.run_id,
           (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
             WHERE e.run_id = t.run_id) + 1,
           'run.running', t.started_at_ms, $1
      FROM taken AS t
)
SELECT s.attempt_id::text, s.run_id::text, s.attempt_no, s.lease_id AS lease_token,
       s.lease_expires_at_ms, s.started_at_ms, s.project_id, s.task_id, s.trigger_id,
       s.idempotency_key, s.scheduled_for_ms, w.payload
  FROM started AS s
  JOIN qlsched.worker_payloads AS w ON w.run_id = s.run_id
 ORDER BY s.started_at_ms, s.run_id

-- name: worker_heartbeat
-- Extend the lease of Attempt $1 held under token $2 to $3 ms from the database clock, only
-- while it is running and not expired; returns the new expiry and the Run's
-- cancel_requested (no row: the lease is lost).
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
)
UPDATE qlsched.attempts AS a
   SET lease_expires_at_ms = c.now_ms + $3::bigint, heartbeat_at_ms = c.now_ms
  FROM clock AS c
 WHERE a.attempt_id = $1::uuid AND a.lease_id = $2 AND a.state = 'running'
   AND a.lease_expires_at_ms > c.now_ms
RETURNING a.lease_expires_at_ms,
          (SELECT r.cancel_requested FROM qlsched.runs AS r WHERE r.run_id = a.run_id)
              AS cancel_requested;

-- fragment: worker_settle
-- Given `held` (locked Attempts with their Run, policy, last event number, database time
-- and the outcome to write), record each Attempt's end and apply the retry policy: a
-- failed or lost Attempt of a Run not asked to cancel, with fewer than max_attempts made,
-- gets a new pristine Attempt and the Run goes back to `queued`, claimable after the
-- back-off; anything else makes the Run terminal. Events in the same statement.
decided AS (
    SELECT h.*,
           (h.attempt_state IN ('failed', 'lost') AND NOT h.cancel_requested
            AND h.attempt_no < h.max_attempts) AS retry
      FROM held AS h
),
settled AS (
    UPDATE qlsched.attempts AS a
       SET state = d.attempt_state, result = d.result, error = d.error,
           exit_code = d.exit_code, output_tail = d.output_tail, finished_at_ms = d.now_ms
      FROM decided AS d
     WHERE a.attempt_id = d.attempt_id
 RETURNING a.attempt_id
),
retried AS (
    INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                  created_at_ms)
    SELECT pg_catalog.gen_random_uuid(), d.run_id, d.attempt_no + 1, 'remote_worker',
           'claimed', d.now_ms
      FROM decided AS d
     WHERE d.retry
 RETURNING attempt_id
),
moved AS (
    UPDATE qlsched.runs AS r
       SET state = CASE WHEN d.retry THEN 'queued'
                        WHEN d.attempt_state = 'succeeded' THEN 'succeeded'
                        WHEN d.attempt_state = 'cancelled' OR d.cancel_requested
                            THEN 'cancelled'
                        ELSE 'failed' END,
           retry_at_ms = CASE WHEN d.retry THEN d.now_ms + d.retry_backoff_ms
                              ELSE r.retry_at_ms END,
           finished_at_ms = CASE WHEN d.retry THEN NULL ELSE d.now_ms END
      FROM decided AS d
     WHERE r.run_id = d.run_id
 RETURNING r.run_id, r.state, r.retry_at_ms, r.project_id, r.trigger_id
),
events AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.gen_random_uuid(), d.run_id, d.seq + ev.n, ev.type, d.now_ms, d.actor
      FROM decided AS d
      JOIN moved AS m ON m.run_id = d.run_id
     CROSS JOIN LATERAL (
            SELECT 1 AS n,
                   CASE WHEN d.attempt_state = 'lost' THEN 'run.attempt_lost'
                        WHEN d.retry THEN 'run.attempt_failed'
                        ELSE 'run.' || m.state END AS type
            UNION ALL
            SELECT 2, 'run.' || m.state WHERE d.retry OR d.attempt_state = 'lost'
           ) AS ev
)

-- name: worker_finish
-- Finish Attempt $1 held under token $2, fenced: running, the token, and the lease not
-- expired by the database clock (checked again after the row lock). $3 the Attempt's end
-- (succeeded, failed, cancelled), $4 its result code, $5 error code, $6 exit code, $7 the
-- output tail. No row: refused by the fence.
WITH held AS (
    SELECT a.attempt_id, a.run_id, a.attempt_no, r.cancel_requested, w.max_attempts,
           w.retry_backoff_ms,
           (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
             WHERE e.run_id = a.run_id) AS seq,
           (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms,
           $3::text AS attempt_state, $4::text AS result, $5::text AS error,
           $6::integer AS exit_code, $7::text AS output_tail, a.worker_id AS actor
      FROM qlsched.attempts AS a
      JOIN qlsched.runs AS r ON r.run_id = a.run_id
      JOIN qlsched.worker_payloads AS w ON w.run_id = a.run_id
     WHERE a.attempt_id = $1::uuid AND a.lease_id = $2 AND a.state = 'running'
       AND a.lease_expires_at_ms
           > (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
       FOR UPDATE OF a, r
),
-- include: worker_settle
SELECT m.state AS run_state, d.retry, m.retry_at_ms, m.project_id, m.trigger_id
  FROM decided AS d
  JOIN moved AS m ON m.run_id = d.run_id;

-- name: worker_reap
-- Mark up to $1 Attempts whose lease expired by the database clock `lost` (SKIP LOCKED,
-- oldest expiry first) and apply the retry policy to each; $2 the reaping worker (the
-- events' actor). Returns what happened to each Run.
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
),
held AS (
    SELECT a.attempt_id, a.run_id, a.attempt_no, r.cancel_requested, w.max_attempts,
           w.retry_backoff_ms,
           (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
             WHERE e.run_id = a.run_id) AS seq,
           c.now_ms, 'lost'::text AS attempt_state, 'lost'::text AS result,
           'lease_expired'::text AS error, NULL::integer AS exit_code,
           NULL::text AS output_tail, $2::text AS actor
      FROM qlsched.attempts AS a
      JOIN qlsched.runs AS r ON r.run_id = a.run_id
      JOIN qlsched.worker_payloads AS w ON w.run_id = a.run_id
     CROSS JOIN clock AS c
     WHERE a.state = 'running' AND a.lease_expires_at_ms <= c.now_ms
     ORDER BY a.lease_expires_at_ms
     LIMIT $1
       FOR UPDATE OF a, r SKIP LOCKED
),
-- include: worker_settle
SELECT d.attempt_id::text, d.run_id::text, m.state AS run_state,
       CASE WHEN d.retry THEN m.retry_at_ms END AS retry_at_ms, m.project_id, m.trigger_id
  FROM decided AS d
  JOIN moved AS m ON m.run_id = d.run_id;
