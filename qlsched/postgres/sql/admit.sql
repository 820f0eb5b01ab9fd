-- name: admit
-- Admit a batch of Fire decisions for owner $1 in ONE statement, sent as one implicit
-- transaction on a connection whose default isolation is SERIALIZABLE (one round trip).
-- Row i of the arrays $2..$16 is one occurrence: project, trigger, claim token, claim
-- version, state version, trigger revision, trigger digest, task revision, execution
-- revision id, scheduled_for (= the durable cursor), next cursor, coalesced count, run id,
-- attempt id, idempotency key.
-- Each row is re-locked and verified item by item against the database's own time: trigger
-- revision, the four fence parts (owner, token, version, expiry), state version, cursor,
-- project active, trigger revision/digest/enabled and its pins, task revision, the pinned
-- execution revision (re-computed SHA-256 of its payload, executor `remote_worker`) and the
-- task digest. A row that fails is left out and its `failure` says why; a row that passes
-- gets the schedule advanced under a WHERE repeating the whole fence, and only rows that
-- advanced get their queued Run, pristine claimed Attempt and the two events: per row all
-- or nothing. A constraint error aborts the statement (the caller then admits row by row).
-- A batch of more than one row never waits for a schedule row: one that another session
-- holds (or that is gone) is left untouched with failure `locked`, and the caller admits it
-- again alone; a batch of one waits for its row (at most the role's lock_timeout).
-- Every table is reached by key (index probes, no scans): under SERIALIZABLE a sequential
-- scan takes a relation-level SIRead lock that conflicts with every other admit; the admit
-- pool also runs with `enable_seqscan = off` so that small, analysed tables keep the probes.
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
input AS MATERIALIZED (
    SELECT *
      FROM ROWS FROM (
                     pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::uuid[]),
                     pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]), pg_catalog.unnest($7::bigint[]),
                     pg_catalog.unnest($8::text[]), pg_catalog.unnest($9::bigint[]), pg_catalog.unnest($10::uuid[]),
                     pg_catalog.unnest($11::bigint[]), pg_catalog.unnest($12::bigint[]), pg_catalog.unnest($13::bigint[]),
                     pg_catalog.unnest($14::uuid[]), pg_catalog.unnest($15::uuid[]), pg_catalog.unnest($16::text[]))
           WITH ORDINALITY
           AS i(project_id, trigger_id, claim_token, claim_version, state_version,
                trigger_revision, trigger_digest, task_revision, execution_revision_id,
                scheduled_for_ms, next_ms, coalesced, run_id, attempt_id, idempotency_key,
                ord)
),
-- The checks that need no schedule row (project active; trigger revision, digest, pins and
-- enabled; task revision; the pinned execution revision's digest and executor; the task
-- digest), all done before any schedule row is touched: under SERIALIZABLE, the shorter the
-- time between reading a schedule row and writing it, the less often two replicas' admits
-- of neighbouring rows (one index page) overlap there and one of them has to retry.
specs AS MATERIALIZED (
    SELECT i.ord, t.task_id,
           CASE
             WHEN p.state IS NULL THEN 'inactive:project_missing'
             WHEN p.state <> 'active' THEN 'inactive:project_archived'
             WHEN t.revision IS DISTINCT FROM i.trigger_revision
               OR t.content_digest IS DISTINCT FROM i.trigger_digest
               OR t.task_revision IS DISTINCT FROM i.task_revision
               OR t.execution_revision_id IS DISTINCT FROM i.execution_revision_id
               OR t.kind IS DISTINCT FROM 'cron'
               THEN 'revision_changed:trigger'
             WHEN NOT t.enabled THEN 'inactive:trigger_disabled'
             WHEN k.revision IS DISTINCT FROM i.task_revision THEN 'revision_changed:task'
             WHEN e.execution_revision_id IS NULL
               OR e.project_id <> i.project_id OR e.task_id <> t.task_id
               OR e.task_revision <> i.task_revision
               THEN 'revision_changed:execution'
             WHEN e.executor_kind <> 'remote_worker' THEN 'digest_invalid:executor'
             WHEN e.digest <> pg_catalog.encode(
                      pg_catalog.sha256(pg_catalog.convert_to(e.payload, 'UTF8')), 'hex')
               THEN 'digest_invalid:execution'
             WHEN k.content_digest <> e.digest THEN 'digest_invalid:task'
           END AS failure
      FROM input AS i
      LEFT JOIN qlsched.projects AS p ON p.project_id = i.project_id
      LEFT JOIN qlsched.triggers AS t
        ON t.project_id = i.project_id AND t.trigger_id = i.trigger_id
      LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
      LEFT JOIN qlsched.execution_revisions AS e
        ON e.execution_revision_id = i.execution_revision_id
),
-- Each schedule row by one primary-key probe, in key order (two admits never lock in
-- opposite orders). A lateral subquery with its own FOR UPDATE is never flattened into a
-- hash join over the whole table (the old `IN (SELECT ...)` form was, on small or
-- unanalysed tables); on a small analysed table the per-row lookup itself may still be
-- planned as a scan, which `enable_seqscan = off` on the admit pool rules out. A batch of
-- more than one row never waits for a row lock (SKIP LOCKED: a row another session holds is
-- left out, failure `locked`, instead of holding back the rest); a batch of one waits, at
-- most the runtime role's lock_timeout (there is nothing else to hold back). Only one of the
-- two arms runs (the other's one-time filter is false). Driven by `specs`, so those checks
-- are complete before the first row is locked.
ordered AS MATERIALIZED (
    SELECT i.project_id, i.trigger_id
      FROM specs AS sp JOIN input AS i ON i.ord = sp.ord
     ORDER BY i.project_id, i.trigger_id
),
locked AS MATERIALIZED (
    SELECT l.*
      FROM ordered AS i
     CROSS JOIN LATERAL (
            SELECT s.project_id, s.trigger_id, s.trigger_revision, s.claim_owner,
                   s.claim_token, s.claim_version, s.claim_expires_at_ms, s.state_version,
                   s.next_fire_at_ms
              FROM qlsched.trigger_schedules AS s
             WHERE s.project_id = i.project_id AND s.trigger_id = i.trigger_id
               AND pg_catalog.cardinality($2::text[]) > 1
               FOR UPDATE OF s SKIP LOCKED) AS l
    UNION ALL
    SELECT l.*
      FROM ordered AS i
     CROSS JOIN LATERAL (
            SELECT s.project_id, s.trigger_id, s.trigger_revision, s.claim_owner,
                   s.claim_token, s.claim_version, s.claim_expires_at_ms, s.state_version,
                   s.next_fire_at_ms
              FROM qlsched.trigger_schedules AS s
             WHERE s.project_id = i.project_id AND s.trigger_id = i.trigger_id
               AND pg_catalog.cardinality($2::text[]) <= 1
               FOR UPDATE OF s) AS l
),
checked AS MATERIALIZED (
    SELECT i.*, sp.task_id,
           CASE
             WHEN l.project_id IS NULL THEN
               CASE WHEN pg_catalog.cardinality($2::text[]) > 1 THEN 'locked'
                    ELSE 'fence_lost:missing' END
             WHEN l.trigger_revision <> i.trigger_revision THEN 'revision_changed:trigger'
             WHEN l.claim_owner IS DISTINCT FROM $1 THEN 'fence_lost:owner'
             WHEN l.claim_token IS DISTINCT FROM i.claim_token THEN 'fence_lost:token'
             WHEN l.claim_version <> i.claim_version THEN 'fence_lost:version'
             WHEN l.claim_expires_at_ms <= (SELECT ms FROM now) THEN 'fence_lost:expiry'
             WHEN l.state_version <> i.state_version THEN 'fence_lost:state'
             WHEN l.next_fire_at_ms IS DISTINCT FROM i.scheduled_for_ms
               THEN 'revision_changed:cursor'
             ELSE sp.failure
           END AS failure
      FROM input AS i
      JOIN specs AS sp ON sp.ord = i.ord
      LEFT JOIN locked AS l
        ON l.project_id = i.project_id AND l.trigger_id = i.trigger_id
),
advanced AS (
    UPDATE qlsched.trigger_schedules AS s
       SET next_fire_at_ms = c.next_ms,
           last_scheduled_at_ms = c.scheduled_for_ms,
           state_version = s.state_version + 1,
           claim_owner = NULL,
           claim_token = NULL,
           claim_expires_at_ms = NULL,
           coalesced_total = s.coalesced_total + c.coalesced,
           updated_at_ms = GREATEST(now.ms, s.updated_at_ms)
      FROM checked AS c, now
     WHERE c.failure IS NULL
       AND s.project_id = c.project_id AND s.trigger_id = c.trigger_id
       AND s.claim_owner = $1 AND s.claim_token = c.claim_token
       AND s.claim_version = c.claim_version AND s.claim_expires_at_ms > now.ms
       AND s.state_version = c.state_version AND s.trigger_revision = c.trigger_revision
       AND s.next_fire_at_ms = c.scheduled_for_ms
 RETURNING s.project_id, s.trigger_id, s.updated_at_ms
),
admitted AS MATERIALIZED (
    SELECT c.*, a.updated_at_ms AS at_ms
      FROM checked AS c
      JOIN advanced AS a ON a.project_id = c.project_id AND a.trigger_id = c.trigger_id
),
run_rows AS (
    INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                              task_revision, execution_revision_id, scheduled_for_ms,
                              idempotency_key, state, owner, queued_at_ms, cancel_requested,
                              created_at_ms, admitted_by_owner, admitted_claim_token,
                              admitted_claim_version)
    SELECT a.run_id, a.project_id, a.trigger_id, a.trigger_revision, a.task_id,
           a.task_revision, a.execution_revision_id, a.scheduled_for_ms, a.idempotency_key,
           'queued', 'runtime', a.at_ms, false, a.at_ms, $1, a.claim_token, a.claim_version
      FROM admitted AS a
),
attempt_rows AS (
    INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                  created_at_ms)
    SELECT a.attempt_id, a.run_id, 1, 'remote_worker', 'claimed', a.at_ms
      FROM admitted AS a
),
event_rows AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.gen_random_uuid(), a.run_id, ev.seq, ev.type, a.at_ms, $1
      FROM admitted AS a
     CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS ev(seq, type)
)
SELECT c.ord, c.failure, a.at_ms AS admitted_at_ms
  FROM checked AS c
  LEFT JOIN admitted AS a ON a.project_id = c.project_id AND a.trigger_id = c.trigger_id
 ORDER BY c.ord;

-- name: run_by_key
-- After a CommitUnknown, on a fresh connection: did the occurrence commit? Diagnostic only.
SELECT r.run_id FROM qlsched.runs AS r WHERE r.idempotency_key = $1;
