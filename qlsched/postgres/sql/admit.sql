-- name: admit
-- Admit a batch of Fires for owner $1 in one statement (one implicit SERIALIZABLE
-- transaction, one round trip). Row i of $2..$17: project, trigger, claim token, claim
-- version, state version, trigger revision, trigger digest, task revision, execution
-- revision id, scheduled_for (the cursor), next cursor, coalesced, run id, attempt id,
-- idempotency key, locator (the tuple id the claim returned, or NULL); $18: wait for rows
-- another session holds (true) or skip them (false; a batch of one always waits).
-- Each row is verified by the database clock against its whole fence, its revisions and
-- digests (the payload's SHA-256 re-computed), and against its due time: a row claimed
-- ahead is never admitted before it falls due by this clock (it comes back untouched,
-- with its `due_at_ms`, for the caller to send again when it is due); a row that passes
-- gets its cursor advanced,
-- its queued Run, claimed Attempt and two events, all or none. A row that fails comes back
-- with what names the failure: (refusal_kind, refusal_part), an outcome's tag and part, for
-- a check that needs no schedule row, else the row read back. One held by another session
-- or not at its locator comes back untouched, for the caller to admit alone by key.
-- A key that already has a Run (a backfill took it) is never a retry loop: the cursor
-- moves past it and the row comes back `key_taken`, with no second Run, Attempt or event.
-- The trigger's overlap policy is decided here, from its unfinished Runs (read only when
-- the policy is not `allow`): `skip` moves the cursor with no Run and counts it;
-- `buffer_one` admits the Run `held` while another is unfinished (skipped when one is
-- already held); `cancel_other` admits it and cancels the unfinished ones (a running one
-- by asking its worker). Each row comes back with its `overlap` decision.
-- Every table is reached by key or tuple id: a scan would take a relation-level SIRead lock
-- every other admit conflicts with.
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
-- Read only by the event inserts, so a batch that admits nothing draws nothing.
draw AS MATERIALIZED (
    SELECT pg_catalog.uuid_send(pg_catalog.gen_random_uuid()) AS nonce
),
input AS MATERIALIZED (
    SELECT *
      FROM ROWS FROM (
                     pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::uuid[]),
                     pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]), pg_catalog.unnest($7::bigint[]),
                     pg_catalog.unnest($8::text[]), pg_catalog.unnest($9::bigint[]), pg_catalog.unnest($10::uuid[]),
                     pg_catalog.unnest($11::bigint[]), pg_catalog.unnest($12::bigint[]), pg_catalog.unnest($13::bigint[]),
                     pg_catalog.unnest($14::uuid[]), pg_catalog.unnest($15::uuid[]), pg_catalog.unnest($16::text[]),
                     pg_catalog.unnest($17::text[]::tid[]))
           WITH ORDINALITY
           AS i(project_id, trigger_id, claim_token, claim_version, state_version,
                trigger_revision, trigger_digest, task_revision, execution_revision_id,
                scheduled_for_ms, next_ms, coalesced, run_id, attempt_id, idempotency_key,
                locator, ord)
),
-- The checks that need no schedule row (project; trigger revision, digest, pins, enabled;
-- task revision; the execution revision's digest and executor; the task digest), each
-- refusal named as ARRAY[kind, part] (a CASE yields one value). All run before any schedule
-- row is touched: under SERIALIZABLE, the shorter a row's read-to-write time, the less often
-- two replicas' admits of neighbouring rows (one index page) overlap and one has to retry.
specs AS MATERIALIZED (
    SELECT i.ord, t.task_id, t.overlap, t.start_deadline_ms,
           CASE
             WHEN p.state IS NULL THEN ARRAY['inactive', 'project_missing']
             WHEN p.state <> 'active' THEN ARRAY['inactive', 'project_archived']
             WHEN t.revision IS DISTINCT FROM i.trigger_revision
               OR t.content_digest IS DISTINCT FROM i.trigger_digest
               OR t.task_revision IS DISTINCT FROM i.task_revision
               OR t.execution_revision_id IS DISTINCT FROM i.execution_revision_id
               OR t.kind IS DISTINCT FROM 'cron'
               THEN ARRAY['revision_changed', 'trigger']
             WHEN NOT t.enabled THEN ARRAY['inactive', 'trigger_disabled']
             WHEN k.revision IS DISTINCT FROM i.task_revision
               THEN ARRAY['revision_changed', 'task']
             WHEN e.execution_revision_id IS NULL
               OR e.project_id <> i.project_id OR e.task_id <> t.task_id
               OR e.task_revision <> i.task_revision
               THEN ARRAY['revision_changed', 'execution']
             WHEN e.executor_kind <> 'remote_worker' THEN ARRAY['digest_invalid', 'executor']
             WHEN e.digest <> pg_catalog.encode(
                      pg_catalog.sha256(pg_catalog.convert_to(e.payload, 'UTF8')), 'hex')
               THEN ARRAY['digest_invalid', 'execution']
             WHEN k.content_digest <> e.digest THEN ARRAY['digest_invalid', 'task']
           END AS refusal
      FROM input AS i
      LEFT JOIN qlsched.projects AS p ON p.project_id = i.project_id
      LEFT JOIN qlsched.triggers AS t
        ON t.project_id = i.project_id AND t.trigger_id = i.trigger_id
      LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
      LEFT JOIN qlsched.execution_revisions AS e
        ON e.execution_revision_id = i.execution_revision_id
),
-- Each schedule row is locked and advanced in one pass, in key order (two admits never lock
-- in opposite orders), reached by its locator and re-checked against its key: a row read
-- and written at once leaves no SIRead lock behind, so two replicas admitting neighbouring
-- rows do not make each other retry. A batch of more than one row skips a row another
-- session holds, unless $18 (the rows a batch left, sent again) says to wait; a batch of
-- one, and rows sent by key (no locator), wait for it (at most the role's lock_timeout):
-- the holder is most often another replica's claim statement, which keeps a row it found
-- taken locked until it ends. Only rows whose spec checks passed are touched, under a
-- WHERE repeating the whole fence.
-- The overlap decision: a CASE evaluates a branch's subquery only when it gets there, so
-- under `allow` (and for refused rows) no Run is read. The reads go through the unfinished
-- Runs' partial index: a trigger's unfinished Runs, never its history.
ordered AS MATERIALIZED (
    SELECT i.*, sp.task_id, sp.refusal, sp.overlap, sp.start_deadline_ms,
           CASE
             WHEN sp.refusal IS NOT NULL OR sp.overlap IN ('allow', 'cancel_other')
               THEN 'queue'
             WHEN NOT EXISTS (SELECT 1 FROM qlsched.runs AS u
                               WHERE u.project_id = i.project_id
                                 AND u.trigger_id = i.trigger_id
                                 AND u.state IN ('held', 'queued', 'running'))
               THEN 'queue'
             WHEN sp.overlap = 'buffer_one'
              AND NOT EXISTS (SELECT 1 FROM qlsched.runs AS u
                               WHERE u.project_id = i.project_id
                                 AND u.trigger_id = i.trigger_id AND u.state = 'held')
               THEN 'hold'
             ELSE 'skip'
           END AS decision
      FROM specs AS sp JOIN input AS i ON i.ord = sp.ord
     ORDER BY i.project_id, i.trigger_id
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
           overlap_skipped_total = s.overlap_skipped_total + (c.decision = 'skip')::integer,
           failures = 0,
           updated_at_ms = GREATEST(now.ms, s.updated_at_ms)
      FROM ordered AS c
     -- One arm per (probe, wait) pair: SKIP LOCKED is syntax, not a value, and each probe
     -- kind needs its own scan; per row the filters leave exactly one arm running (by key
     -- always waits).
     CROSS JOIN LATERAL (
            SELECT b.tid FROM (
                SELECT x.ctid AS tid FROM qlsched.trigger_schedules AS x
                 WHERE x.ctid = c.locator
                   AND x.project_id = c.project_id AND x.trigger_id = c.trigger_id
                   AND pg_catalog.cardinality($2::text[]) > 1 AND NOT $18::boolean
                   FOR UPDATE OF x SKIP LOCKED) AS b
            UNION ALL
            SELECT o.tid FROM (
                SELECT x.ctid AS tid FROM qlsched.trigger_schedules AS x
                 WHERE x.ctid = c.locator
                   AND x.project_id = c.project_id AND x.trigger_id = c.trigger_id
                   AND (pg_catalog.cardinality($2::text[]) <= 1 OR $18::boolean)
                   FOR UPDATE OF x) AS o
            UNION ALL
            SELECT w.tid FROM (
                SELECT x.ctid AS tid FROM qlsched.trigger_schedules AS x
                 WHERE c.locator IS NULL
                   AND x.project_id = c.project_id AND x.trigger_id = c.trigger_id
                   FOR UPDATE OF x) AS w
           ) AS l,
           now
     WHERE c.refusal IS NULL
       AND s.ctid = l.tid
       AND s.claim_owner = $1 AND s.claim_token = c.claim_token
       AND s.claim_version = c.claim_version AND s.claim_expires_at_ms > now.ms
       AND s.state_version = c.state_version AND s.trigger_revision = c.trigger_revision
       AND s.next_fire_at_ms = c.scheduled_for_ms
       AND s.due_at_ms <= now.ms
 RETURNING c.ord, s.updated_at_ms
),
-- Joined by request row, not by key: a Fire gets a Run only if its own row advanced.
admitted AS MATERIALIZED (
    SELECT c.*, a.updated_at_ms AS at_ms
      FROM ordered AS c
      JOIN advanced AS a ON a.ord = c.ord
),
run_rows AS (
    -- include: admitted_run_columns
    SELECT a.run_id, a.project_id, a.trigger_id, a.trigger_revision, a.task_id,
           a.task_revision, a.execution_revision_id, a.scheduled_for_ms, a.idempotency_key,
           CASE WHEN a.decision = 'hold' THEN 'held' ELSE 'queued' END, 'runtime', a.at_ms,
           false, a.at_ms, $1, a.claim_token, a.claim_version,
           CASE WHEN a.decision = 'queue' THEN a.at_ms + a.start_deadline_ms END
      FROM admitted AS a
     WHERE a.decision <> 'skip'
        ON CONFLICT (idempotency_key) DO NOTHING
 RETURNING run_id, project_id, trigger_id, created_at_ms AS at_ms, state,
           pg_catalog.array_position($14::uuid[], run_id) AS ord
),
-- Below, a Run's request row is found by its place (`ord`), not by a join to `admitted`:
-- a nested loop in the generic plan, n * n row pairs (65,536 for 256 Runs). The places run
-- 1..n (WITH ORDINALITY) and `ordered` holds every row, so element k of an array of its
-- rows in place order is row k's.
overlap_new AS (
    SELECT n.run_id, n.project_id, n.trigger_id, n.at_ms, $1::text AS actor
      FROM run_rows AS n
     WHERE (SELECT pg_catalog.array_agg(c.overlap = 'cancel_other' ORDER BY c.ord)
              FROM ordered AS c)[n.ord]
),
-- include: cancel_others
attempt_rows AS (
    INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                  created_at_ms)
    SELECT ($15::uuid[])[n.ord], n.run_id, 1, 'remote_worker', 'claimed', n.at_ms
      FROM run_rows AS n
),
-- Event ids: one draw of strong randomness per statement, as the claim's tokens, with the
-- event's place in the batch (2 * row + seq) in the last four bytes: version-4 UUIDs,
-- distinct within the statement, and one draw instead of two per occurrence.
event_rows AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.encode(overlay(draw.nonce PLACING
               pg_catalog.int4send((2 * n.ord + ev.seq)::integer) FROM 13 FOR 4), 'hex')::uuid,
           n.run_id, ev.seq, ev.type, n.at_ms, $1
      FROM run_rows AS n
     CROSS JOIN draw
     CROSS JOIN LATERAL (VALUES (1, 'run.created'),
                                (2, CASE WHEN n.state = 'held' THEN 'run.held'
                                         ELSE 'run.queued' END)) AS ev(seq, type)
)
-- A row that was not advanced is read again (by key, without a lock: only these rows), so
-- the caller can name the fence part that failed (core's `failed_part`, the same rule a
-- refused skip or release is diagnosed by); a row whose fence, cursor and specs all hold in
-- this snapshot was held by another session or is not at its locator.
SELECT c.ord, a.at_ms AS admitted_at_ms, c.decision AS overlap,
       a.ord IS NOT NULL AND c.decision <> 'skip'
           AND NOT EXISTS (SELECT 1 FROM run_rows AS n WHERE n.run_id = c.run_id)
           AS key_taken,
       c.refusal[1] AS refusal_kind,
       c.refusal[2] AS refusal_part, (SELECT ms FROM now) AS now_ms,
       r.trigger_revision, r.claim_owner, r.claim_token, r.claim_version,
       r.claim_expires_at_ms, r.state_version, r.next_fire_at_ms, r.due_at_ms
  FROM ordered AS c
  LEFT JOIN admitted AS a ON a.ord = c.ord
  LEFT JOIN LATERAL (
         SELECT s.trigger_revision, s.claim_owner, s.claim_token, s.claim_version,
                s.claim_expires_at_ms, s.state_version, s.next_fire_at_ms, s.due_at_ms
           FROM qlsched.trigger_schedules AS s
          WHERE a.ord IS NULL
            AND s.project_id = c.project_id AND s.trigger_id = c.trigger_id
         OFFSET 0) AS r ON true
 ORDER BY c.ord;

-- name: count_already_admitted
-- After an admit found a Fire's key taken: count it on its row ($1 project, $2 trigger).
-- Unfenced and after the commit: a count of how often cron deferred to another path's Run,
-- not a bucket of the accounting (the Run is the occurrence's bucket).
UPDATE qlsched.trigger_schedules AS s
   SET already_admitted_total = s.already_admitted_total + 1
 WHERE s.project_id = $1 AND s.trigger_id = $2;

-- name: run_by_key
-- After a CommitUnknown, on a fresh connection: did the occurrence commit? Diagnostic only.
SELECT r.run_id FROM qlsched.runs AS r WHERE r.idempotency_key = $1;

-- fragment: admitted_run_columns
-- A new Run's columns as an admit inserts it: the cron admit above and a request's
-- (request_admit) alike, each selecting its values in this order.
INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                          task_revision, execution_revision_id, scheduled_for_ms,
                          idempotency_key, state, owner, queued_at_ms, cancel_requested,
                          created_at_ms, admitted_by_owner, admitted_claim_token,
                          admitted_claim_version, start_by_ms)
