-- name: verify_schedules
-- The exactly-once verifier's view of every trigger head (observer role): the spec core
-- needs to enumerate occurrences (cron, zone, policy), the durable cursor that bounds what
-- has been decided, and the two counters that account for occurrences decided without a
-- Run (skipped by policy, passed over by a late Fire). No parameters.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, s.next_fire_at_ms,
       s.last_scheduled_at_ms, s.skipped_total, s.coalesced_total, s.claim_version,
       t.cron, t.timezone, t.misfire_policy, t.misfire_grace_ms, t.dst_gap, t.dst_fold
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 ORDER BY s.project_id, s.trigger_id;

-- name: verify_duplicates
-- Occurrences with more than one Run, over every revision (a re-published trigger starts
-- after its last occurrence, so no occurrence may repeat across revisions either). Runs of
-- trigger-now requests are left out: their keys are one per request, not per occurrence.
SELECT r.project_id, r.trigger_id, r.scheduled_for_ms, pg_catalog.count(*)::bigint AS runs
  FROM qlsched.runs AS r
 WHERE r.idempotency_key NOT LIKE 'ql3:manual:%'
 GROUP BY r.project_id, r.trigger_id, r.scheduled_for_ms
HAVING pg_catalog.count(*) > 1
 ORDER BY r.project_id, r.trigger_id, r.scheduled_for_ms;

-- name: verify_requests
-- The recorded control requests (issue #18) the verifier accounts Runs to: trigger-now
-- requests by key and recording time, backfills by range. No parameters.
SELECT q.request_id, q.project_id, q.trigger_id, q.trigger_revision, q.kind,
       q.created_at_ms, q.from_ms, q.to_ms
  FROM qlsched.control_requests AS q
 ORDER BY q.created_at_ms, q.request_id;

-- fragment: admission_shape_ctes
-- CTEs a (per Run: its Attempts, and the pristine ones: attempt 1, `claimed`,
-- `remote_worker`, every worker/session/lease/offer/callback/start/result/error field NULL)
-- and e (per Run: its events, and the two admission events, seq 1 `run.created`, seq 2
-- `run.queued`), for verify_runs and the bench's audit.
a AS (
    SELECT a.run_id, pg_catalog.count(*)::bigint AS attempts,
           (pg_catalog.count(*) FILTER (
               WHERE a.attempt_no = 1 AND a.state = 'claimed'
                 AND a.executor_kind = 'remote_worker'
                 AND a.worker_id IS NULL AND a.session_id IS NULL AND a.lease_id IS NULL
                 AND a.offer_id IS NULL AND NOT a.has_callback_token
                 AND a.started_at_ms IS NULL AND a.result IS NULL AND a.error IS NULL
           ))::bigint AS pristine
      FROM qlsched.attempts_redacted AS a
     GROUP BY a.run_id
),
e AS (
    SELECT e.run_id, pg_catalog.count(*)::bigint AS events,
           (pg_catalog.count(*) FILTER (
               WHERE (e.seq = 1 AND e.type = 'run.created')
                  OR (e.seq = 2 AND e.type = 'run.queued')
           ))::bigint AS admission_events
      FROM qlsched.run_events AS e
     GROUP BY e.run_id
)

-- name: verify_runs
-- Every Run with the shape admission must have left: its fence (owner, token, version),
-- queue time and key, and per Run the number of Attempts, of pristine Attempts (attempt 1,
-- `claimed`, `remote_worker`, every worker/session/lease/offer/callback/start/result/error
-- field NULL), of events, and of the two admission events (seq 1 `run.created`, seq 2
-- `run.queued`). No parameters; ordered by trigger and occurrence. Attempts are read through
-- attempts_redacted: the observer may know whether a callback token is set, not the token.
WITH
-- include: admission_shape_ctes
SELECT r.run_id, r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.queued_at_ms, r.idempotency_key, r.state, r.admitted_by_owner,
       r.admitted_claim_token, r.admitted_claim_version,
       COALESCE(a.attempts, 0) AS attempts, COALESCE(a.pristine, 0) AS pristine_attempts,
       COALESCE(e.events, 0) AS events, COALESCE(e.admission_events, 0) AS admission_events
  FROM qlsched.runs AS r
  LEFT JOIN a ON a.run_id = r.run_id
  LEFT JOIN e ON e.run_id = r.run_id
 ORDER BY r.project_id, r.trigger_id, r.scheduled_for_ms, r.run_id;

-- name: demo_schedules
-- What the demo's monitor polls (observer role): per schedule row the cursor and the claim
-- (owner, version, expiry), with one observation of the database clock, so lag and lease
-- expiry are judged by the only clock that decides them. No parameters.
SELECT s.project_id, s.trigger_id, s.active, s.next_fire_at_ms, s.claim_owner,
       s.claim_version, s.claim_expires_at_ms,
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
  FROM qlsched.trigger_schedules AS s
 ORDER BY s.project_id, s.trigger_id;

-- name: demo_runs_by_owner
-- Runs admitted so far, per admitting replica (the fence owner each Run records).
SELECT r.admitted_by_owner AS owner, pg_catalog.count(*)::bigint AS runs
  FROM qlsched.runs AS r
 GROUP BY r.admitted_by_owner;

-- name: demo_run_for_occurrence
-- The Run of one occurrence, if any: $1 project, $2 trigger, $3 scheduled_for ms. The demo
-- reads it for each claim the killed replica held, to show who admitted it and when.
SELECT r.admitted_by_owner, r.admitted_claim_version, r.queued_at_ms
  FROM qlsched.runs AS r
 WHERE r.project_id = $1 AND r.trigger_id = $2 AND r.scheduled_for_ms = $3
 ORDER BY r.created_at_ms
 LIMIT 1;

-- name: demo_drop_database_statement
-- The DROP DATABASE statement for the demo's own database $1, quoted by the server (it
-- cannot be prepared). FORCE ends the sessions a killed replica's server may still hold.
SELECT pg_catalog.format('DROP DATABASE IF EXISTS %I WITH (FORCE)', $1::text);
