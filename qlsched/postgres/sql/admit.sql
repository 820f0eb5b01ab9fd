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
locked AS MATERIALIZED (
    SELECT s.project_id, s.trigger_id, s.trigger_revision, s.claim_owner, s.claim_token,
           s.claim_version, s.claim_expires_at_ms, s.state_version, s.next_fire_at_ms
      FROM qlsched.trigger_schedules AS s
     WHERE (s.project_id, s.trigger_id) IN (SELECT i.project_id, i.trigger_id FROM input AS i)
     ORDER BY s.project_id, s.trigger_id
       FOR UPDATE OF s
),
checked AS MATERIALIZED (
    SELECT i.*, t.task_id,
           CASE
             WHEN l.project_id IS NULL THEN 'fence_lost:missing'
             WHEN l.trigger_revision <> i.trigger_revision THEN 'revision_changed:trigger'
             WHEN l.claim_owner IS DISTINCT FROM $1 THEN 'fence_lost:owner'
             WHEN l.claim_token IS DISTINCT FROM i.claim_token THEN 'fence_lost:token'
             WHEN l.claim_version <> i.claim_version THEN 'fence_lost:version'
             WHEN l.claim_expires_at_ms <= (SELECT ms FROM now) THEN 'fence_lost:expiry'
             WHEN l.state_version <> i.state_version THEN 'fence_lost:state'
             WHEN l.next_fire_at_ms IS DISTINCT FROM i.scheduled_for_ms
               THEN 'revision_changed:cursor'
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
      LEFT JOIN locked AS l
        ON l.project_id = i.project_id AND l.trigger_id = i.trigger_id
      LEFT JOIN qlsched.projects AS p ON p.project_id = i.project_id
      LEFT JOIN qlsched.triggers AS t
        ON t.project_id = i.project_id AND t.trigger_id = i.trigger_id
      LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
      LEFT JOIN qlsched.execution_revisions AS e
        ON e.execution_revision_id = i.execution_revision_id
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
