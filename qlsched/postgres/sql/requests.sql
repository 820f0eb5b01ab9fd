-- name: request_target
-- What a new request is checked against (admin, before recording it): the trigger's
-- revision, enabled flag, cron and zone, its project's state, and the database time.
-- $1 = project, $2 = trigger. No row: no such trigger.
SELECT t.revision, t.enabled, t.cron, t.timezone, t.dst_gap, t.dst_fold,
       p.state AS project_state,
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
  FROM qlsched.triggers AS t
  JOIN qlsched.projects AS p ON p.project_id = t.project_id
 WHERE t.project_id = $1 AND t.trigger_id = $2;

-- name: request_insert
-- Record one request (admin). $1 project, $2 trigger, $3 trigger revision at request time,
-- $4 kind, $5 note, $6 actor, $7 from_ms, $8 to_ms, $9 total, $10 max, $11 a backfill's
-- first occurrence (its `next_ms`), $12 the overlap policy asked for ('allow', or NULL:
-- the trigger's). The id, who (SESSION_USER) and when (database time) are the column
-- defaults.
INSERT INTO qlsched.control_requests (project_id, trigger_id, trigger_revision, kind, note,
                                      actor, from_ms, to_ms, total, max_occurrences, next_ms,
                                      overlap)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
RETURNING request_id, created_at_ms, requested_by;

-- name: request_claim
-- Claim up to $2 pending requests that can progress, for owner $1, lease $3 ms: one
-- statement in autocommit, so the lease commits at once (the schedule claim's rule).
-- A request can progress when its trigger is not paused (a paused trigger's requests are
-- held, and take no slot) and, for a backfill, when its next occurrence lies before the
-- cron cursor (a backfill waiting for cron takes no slot either). Trigger-now requests come
-- first: they never wait behind backfills. The first columns say whether any such request
-- is pending at all (so a replica knows whether to look again next round); then each
-- claimed request with its fence, its trigger's current spec and the cron cursor. The join
-- to the schedule row is a hint read in this statement's snapshot: the admit re-checks
-- pause and cursor under its own lock.
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
ready AS MATERIALIZED (
    SELECT r.request_id, r.kind, r.created_at_ms, r.claim_token, r.claim_expires_at_ms
      FROM qlsched.control_requests AS r
      JOIN qlsched.trigger_schedules AS s
        ON s.project_id = r.project_id AND s.trigger_id = r.trigger_id
     WHERE r.state = 'pending'
       AND s.paused_at_ms IS NULL
       AND (r.kind = 'trigger'
            OR (s.next_fire_at_ms IS NOT NULL
                AND COALESCE(r.next_ms, r.from_ms) < s.next_fire_at_ms))
),
chosen AS MATERIALIZED (
    SELECT r.request_id
      FROM qlsched.control_requests AS r
      JOIN ready AS y ON y.request_id = r.request_id
     WHERE r.state = 'pending'
       AND (r.claim_token IS NULL OR r.claim_expires_at_ms <= (SELECT ms FROM now))
     ORDER BY r.kind <> 'trigger', r.created_at_ms, r.request_id
     LIMIT $2
       FOR UPDATE OF r SKIP LOCKED
),
claimed AS (
    UPDATE qlsched.control_requests AS r
       SET claim_owner = $1,
           claim_token = pg_catalog.gen_random_uuid(),
           claim_version = r.claim_version + 1,
           claim_expires_at_ms = GREATEST(now.ms, r.updated_at_ms) + $3,
           updated_at_ms = GREATEST(now.ms, r.updated_at_ms)
      FROM chosen, now
     WHERE r.request_id = chosen.request_id
 RETURNING r.request_id, r.project_id, r.trigger_id, r.trigger_revision, r.kind,
           r.created_at_ms, r.from_ms, r.to_ms, r.cursor_ms, r.claim_owner, r.claim_token,
           r.claim_version, r.claim_expires_at_ms, r.updated_at_ms
)
SELECT now.ms AS now_ms,
       EXISTS (SELECT 1 FROM ready) AS any_pending,
       c.request_id, c.project_id, c.trigger_id, c.trigger_revision, c.kind,
       c.created_at_ms, c.from_ms, c.to_ms, c.cursor_ms, c.claim_owner, c.claim_token,
       c.claim_version, c.claim_expires_at_ms, c.updated_at_ms AS claimed_at_ms,
       t.revision AS current_revision, t.cron, t.timezone, t.dst_gap, t.dst_fold,
       t.content_digest,
       t.task_revision, t.execution_revision_id, s.next_fire_at_ms AS schedule_cursor_ms
  FROM now
  LEFT JOIN claimed AS c ON true
  LEFT JOIN qlsched.triggers AS t
    ON t.project_id = c.project_id AND t.trigger_id = c.trigger_id
  LEFT JOIN qlsched.trigger_schedules AS s
    ON s.project_id = c.project_id AND s.trigger_id = c.trigger_id
 ORDER BY c.kind <> 'trigger', c.created_at_ms, c.request_id;

-- name: request_admit
-- Admit one claimed request's chunk in one statement (one implicit SERIALIZABLE
-- transaction): its Runs, Attempts and events, its counts and cursor, and its state.
-- $1 request, $2 owner, $3 claim token, $4 claim version (with the expiry against the
-- database clock: the fence), $5 the request cursor the chunk starts after (NULL: none),
-- $6 trigger revision asked for, $7 trigger digest, $8 task revision, $9 execution
-- revision id, $10..$13 the chunk (scheduled_for, run id, attempt id, key per occurrence),
-- $14 the cursor after the chunk, $15 nothing of the range is left after it, $16 the
-- backfill's next occurrence after the chunk (the one it waits for when the chunk is empty).
-- The trigger's schedule row is locked first (FOR NO KEY UPDATE): a pause or a cursor write
-- that commits after this snapshot makes this statement retry instead of admitting beside
-- it, and nothing of a paused trigger is admitted (the request is `held`, released).
-- Specs are verified as the schedule admit verifies them; a spec that fails refuses the
-- request for good, and so does a chunk that would count past the recorded total
-- (`count_mismatch`: the recorder and this replica disagree on the occurrences), and so does
-- a chunk reaching back over Runs retention deleted since the request was recorded
-- (`before_retention`: their keys are free, so they would run again). A backfill
-- occurrence must lie before the trigger's cron cursor, and a NULL cursor waits: cron has
-- not decided where it starts, so nothing is a backfill's yet. A key already taken is
-- counted (already_admitted), never inserted twice; an occurrence cron had counted as not
-- run (at or after `decided_from_ms`) and admitted here is counted in `backfilled_total`.
-- The trigger's overlap policy (unless the request asked for `allow`) decides each
-- occurrence from the trigger's unfinished Runs (read only under `skip` or `buffer_one`):
-- `skip` admits the first only when none is unfinished; `buffer_one` fills the free places
-- (one queued, one held) in order; the rest are counted in the request's overlap_skipped.
-- Under `cancel_other` the trigger's other unfinished Runs are cancelled, as a cron admit
-- does. The claim is cleared in the same write whatever happened: the next chunk is claimed
-- again.
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
draw AS MATERIALIZED (
    SELECT pg_catalog.uuid_send(pg_catalog.gen_random_uuid()) AS nonce
),
req AS MATERIALIZED (
    SELECT r.request_id, r.project_id, r.trigger_id, r.trigger_revision, r.kind, r.total,
           r.admitted, r.already_admitted, r.overlap, r.overlap_skipped
      FROM qlsched.control_requests AS r
     WHERE r.request_id = $1 AND r.state = 'pending'
       AND r.claim_owner = $2 AND r.claim_token = $3 AND r.claim_version = $4
       AND r.claim_expires_at_ms > (SELECT ms FROM now)
       AND r.cursor_ms IS NOT DISTINCT FROM $5::bigint
       FOR UPDATE OF r
),
sched AS MATERIALIZED (
    SELECT s.project_id, s.trigger_id, s.next_fire_at_ms, s.decided_from_ms,
           s.paused_at_ms IS NOT NULL AS held
      FROM qlsched.trigger_schedules AS s
      JOIN req AS q ON s.project_id = q.project_id AND s.trigger_id = q.trigger_id
       FOR NO KEY UPDATE OF s
),
occ AS MATERIALIZED (
    SELECT *
      FROM ROWS FROM (pg_catalog.unnest($10::bigint[]), pg_catalog.unnest($11::uuid[]),
                      pg_catalog.unnest($12::uuid[]), pg_catalog.unnest($13::text[]))
           WITH ORDINALITY AS o(scheduled_for_ms, run_id, attempt_id, idempotency_key, ord)
),
spec AS MATERIALIZED (
    SELECT t.task_id, COALESCE(q.overlap, t.overlap) AS policy, t.start_deadline_ms,
           CASE
             WHEN p.state IS DISTINCT FROM 'active' THEN 'project_archived'
             WHEN NOT t.enabled THEN 'trigger_disabled'
             WHEN t.revision IS DISTINCT FROM q.trigger_revision
               OR t.revision IS DISTINCT FROM $6::bigint
               OR t.content_digest IS DISTINCT FROM $7::text
               OR t.task_revision IS DISTINCT FROM $8::bigint
               OR t.execution_revision_id IS DISTINCT FROM $9::uuid
               OR t.kind IS DISTINCT FROM 'cron'
               OR k.revision IS DISTINCT FROM $8::bigint
               OR e.execution_revision_id IS NULL
               OR e.project_id <> q.project_id OR e.task_id <> t.task_id
               OR e.task_revision <> $8::bigint
               THEN 'revision_changed'
             WHEN e.executor_kind <> 'remote_worker'
               OR e.digest <> pg_catalog.encode(
                      pg_catalog.sha256(pg_catalog.convert_to(e.payload, 'UTF8')), 'hex')
               OR k.content_digest <> e.digest
               THEN 'digest_invalid'
             WHEN q.admitted + q.already_admitted + q.overlap_skipped
                  + (SELECT pg_catalog.count(*) FROM occ) > COALESCE(q.total, 1)
               THEN 'count_mismatch'
             WHEN q.kind = 'backfill'
              AND EXISTS (SELECT 1 FROM qlsched.retention_pruned AS rp
                           WHERE rp.project_id = q.project_id
                             AND rp.trigger_id = q.trigger_id
                             AND rp.through_ms >= (SELECT pg_catalog.min(o.scheduled_for_ms)
                                                     FROM occ AS o))
               THEN 'before_retention'
           END AS failure
      FROM req AS q
      LEFT JOIN qlsched.projects AS p ON p.project_id = q.project_id
      LEFT JOIN qlsched.triggers AS t
        ON t.project_id = q.project_id AND t.trigger_id = q.trigger_id
      LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
      LEFT JOIN qlsched.execution_revisions AS e ON e.execution_revision_id = $9::uuid
),
bound AS MATERIALIZED (
    SELECT NOT COALESCE(sc.held, false)
           AND (q.kind = 'trigger'
                OR (sc.next_fire_at_ms IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM occ AS o
                                     WHERE o.scheduled_for_ms >= sc.next_fire_at_ms)))
           AS ok,
           COALESCE(sc.held, false) AS held
      FROM req AS q
      LEFT JOIN sched AS sc ON true
),
go AS MATERIALIZED (
    SELECT q.*, sp.task_id, sp.policy, sp.start_deadline_ms
      FROM req AS q, spec AS sp, bound AS b
     WHERE sp.failure IS NULL AND b.ok
),
-- The trigger's unfinished Runs, read only under a policy that needs them.
unfinished AS MATERIALIZED (
    SELECT (SELECT pg_catalog.count(*) FROM qlsched.runs AS u
             WHERE u.project_id = g.project_id AND u.trigger_id = g.trigger_id
               AND u.state IN ('queued', 'running')) AS active,
           (SELECT pg_catalog.count(*) FROM qlsched.runs AS u
             WHERE u.project_id = g.project_id AND u.trigger_id = g.trigger_id
               AND u.state = 'held') AS held
      FROM go AS g
     WHERE g.policy IN ('skip', 'buffer_one')
),
decided AS MATERIALIZED (
    SELECT o.*,
           CASE
             WHEN g.policy NOT IN ('skip', 'buffer_one') THEN 'queue'
             WHEN g.policy = 'skip'
               THEN CASE WHEN u.active + u.held = 0 AND o.ord = 1 THEN 'queue' ELSE 'skip' END
             WHEN u.held > 0 THEN 'skip'
             WHEN u.active > 0 THEN CASE WHEN o.ord = 1 THEN 'hold' ELSE 'skip' END
             WHEN o.ord = 1 THEN 'queue'
             WHEN o.ord = 2 THEN 'hold'
             ELSE 'skip'
           END AS decision
      FROM occ AS o
     CROSS JOIN go AS g
      LEFT JOIN unfinished AS u ON true
),
run_rows AS (
    -- include: admitted_run_columns
    SELECT o.run_id, g.project_id, g.trigger_id, g.trigger_revision, g.task_id, $8, $9,
           o.scheduled_for_ms, o.idempotency_key,
           CASE WHEN o.decision = 'hold' THEN 'held' ELSE 'queued' END, 'runtime', now.ms,
           false, now.ms, $2, $3, $4,
           CASE WHEN o.decision = 'queue' THEN now.ms + g.start_deadline_ms END
      FROM go AS g CROSS JOIN decided AS o CROSS JOIN now
     WHERE o.decision <> 'skip'
        ON CONFLICT (idempotency_key) DO NOTHING
 RETURNING run_id, scheduled_for_ms, state,
           pg_catalog.array_position($11::uuid[], run_id) AS ord
),
-- A Run's occurrence is found by its place in the chunk (`ord`), not by a join to `occ`:
-- a nested loop in the generic plan, n * n row pairs (as in the cron admit).
overlap_new AS (
    SELECT n.run_id, g.project_id, g.trigger_id, now.ms AS at_ms, $2::text AS actor
      FROM run_rows AS n CROSS JOIN go AS g CROSS JOIN now
     WHERE g.policy = 'cancel_other'
),
-- include: cancel_others
attempt_rows AS (
    INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                  created_at_ms)
    SELECT ($12::uuid[])[n.ord], n.run_id, 1, 'remote_worker', 'claimed', now.ms
      FROM run_rows AS n CROSS JOIN now
),
event_rows AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.encode(overlay(draw.nonce PLACING
               pg_catalog.int4send((2 * n.ord + ev.seq)::integer) FROM 13 FOR 4), 'hex')::uuid,
           n.run_id, ev.seq, ev.type, now.ms, $2
      FROM run_rows AS n
     CROSS JOIN draw
     CROSS JOIN now
     CROSS JOIN LATERAL (VALUES (1, 'run.created'),
                                (2, CASE WHEN n.state = 'held' THEN 'run.held'
                                         ELSE 'run.queued' END)) AS ev(seq, type)
),
counts AS MATERIALIZED (
    SELECT (SELECT pg_catalog.count(*) FROM run_rows) AS inserted,
           (SELECT pg_catalog.count(*) FROM occ) AS chunk,
           (SELECT pg_catalog.count(*) FROM decided AS d WHERE d.decision = 'skip') AS skipped,
           (SELECT pg_catalog.count(*) FROM run_rows AS n, go AS g, sched AS sc
             WHERE g.kind = 'backfill'
               AND n.scheduled_for_ms >= sc.decided_from_ms) AS recovered,
           EXISTS (SELECT 1 FROM go) AS went
),
recounted AS (
    UPDATE qlsched.trigger_schedules AS s
       SET backfilled_total = s.backfilled_total + c.recovered
      FROM sched AS sc, counts AS c
     WHERE s.project_id = sc.project_id AND s.trigger_id = sc.trigger_id AND c.recovered > 0
),
settled AS (
    UPDATE qlsched.control_requests AS r
       SET cursor_ms = CASE WHEN c.went AND q.kind = 'backfill' THEN $14::bigint
                            ELSE r.cursor_ms END,
           next_ms = CASE WHEN q.kind = 'backfill' AND sp.failure IS NULL
                          THEN COALESCE($16::bigint, r.next_ms) ELSE r.next_ms END,
           admitted = r.admitted + c.inserted,
           already_admitted = r.already_admitted
               + CASE WHEN c.went THEN c.chunk - c.inserted - c.skipped ELSE 0 END,
           overlap_skipped = r.overlap_skipped + CASE WHEN c.went THEN c.skipped ELSE 0 END,
           state = CASE WHEN sp.failure IS NOT NULL THEN 'refused'
                        WHEN c.went AND $15::boolean THEN 'done'
                        ELSE 'pending' END,
           refused_reason = sp.failure,
           done_at_ms = CASE WHEN sp.failure IS NOT NULL OR (c.went AND $15::boolean)
                             THEN now.ms END,
           failures = 0,
           claim_owner = NULL,
           claim_token = NULL,
           claim_expires_at_ms = NULL,
           updated_at_ms = GREATEST(now.ms, r.updated_at_ms)
      FROM req AS q, spec AS sp, counts AS c, now
     WHERE r.request_id = q.request_id
 RETURNING r.state
)
SELECT (SELECT ms FROM now) AS now_ms,
       EXISTS (SELECT 1 FROM req) AS fenced,
       (SELECT sp.failure FROM spec AS sp) AS refused_reason,
       (SELECT b.ok FROM bound AS b) AS bound_ok,
       (SELECT b.held FROM bound AS b) AS held,
       (SELECT c.inserted FROM counts AS c) AS inserted,
       (SELECT c.skipped FROM counts AS c) AS skipped,
       (SELECT c.went FROM counts AS c) AS went,
       (SELECT s.state FROM settled AS s) AS state;

-- name: request_note_failure
-- A claimed request whose admit could not commit (retries spent, a server error): give the
-- claim back at once and count the failure; past $5 failures in a row it is refused
-- (`failed_repeatedly`, the last SQLSTATE in `last_failure`) instead of retried forever.
-- $1 request, $2 owner, $3 claim token, $4 claim version, $6 the failure code.
UPDATE qlsched.control_requests AS r
   SET failures = r.failures + 1,
       last_failure = $6::text,
       state = CASE WHEN r.failures + 1 >= $5::integer THEN 'refused' ELSE r.state END,
       refused_reason = CASE WHEN r.failures + 1 >= $5::integer THEN 'failed_repeatedly' END,
       done_at_ms = CASE WHEN r.failures + 1 >= $5::integer
                         THEN (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
                    END,
       claim_owner = NULL,
       claim_token = NULL,
       claim_expires_at_ms = NULL
 WHERE r.request_id = $1 AND r.state = 'pending'
   AND r.claim_owner = $2 AND r.claim_token = $3 AND r.claim_version = $4
RETURNING r.state;

-- fragment: status_request_columns
-- A request from requests `r` as `status` shows it (core.requests.RequestView), with `held`:
-- pending for a paused trigger (it runs after resume).
r.request_id, r.project_id, r.trigger_id, r.trigger_revision, r.kind, r.note,
r.actor, r.requested_by, r.created_at_ms, r.state, r.refused_reason, r.done_at_ms,
r.from_ms, r.to_ms, r.total, r.cursor_ms, r.admitted, r.already_admitted,
r.claim_owner, r.failures, r.last_failure, r.overlap_skipped,
r.state = 'pending' AND EXISTS (
    SELECT 1 FROM qlsched.trigger_schedules AS s
     WHERE s.project_id = r.project_id AND s.trigger_id = r.trigger_id
       AND s.paused_at_ms IS NOT NULL) AS held

-- name: status_requests
-- The latest requests for `status` (pending ones first, then by time); $1 = how many.
-- Two index walks: the pending partial index, and the recent ones backwards.
(SELECT
        -- include: status_request_columns
   FROM qlsched.control_requests AS r
  WHERE r.state = 'pending'
  ORDER BY r.created_at_ms, r.request_id
  LIMIT $1)
UNION
(SELECT
        -- include: status_request_columns
   FROM qlsched.control_requests AS r
  ORDER BY r.created_at_ms DESC
  LIMIT $1)
ORDER BY created_at_ms DESC, request_id;
