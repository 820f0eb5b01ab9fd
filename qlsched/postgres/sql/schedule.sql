-- name: claim
-- Claim up to $2 due or uninitialised schedule rows for owner $1, lease $3 ms; a row due
-- within the next $4 ms counts as due (claimed ahead: the replica decides it now and admits
-- it when it falls due, which the admit checks by this clock; 0: only rows already due).
-- One statement, sent alone in autocommit on a READ COMMITTED connection, so the lease is
-- committed at once and no lock outlives it. Time: one observation of the database clock.
-- Three arms, each an ordered partial-index scan with SKIP LOCKED: unclaimed due rows
-- (trigger_schedules_claim_idx, by due time, project, trigger), unclaimed uninitialised
-- rows (trigger_schedules_fresh_idx, by key), and rows whose claim expired
-- (trigger_schedules_expiry_idx). The due time (`due_at_ms`, generated
-- from the cursor and the jitter) is what is due; without jitter it is the cursor. No cron
-- computation and no Run ids here. The token is one random draw per statement with the
-- row's place in the batch in its last four bytes: new for every claim of a row, distinct
-- within the batch, and one draw of strong randomness per statement instead of one per row.
-- `locator` is the claimed row version's tuple id: the admit reaches the row by it without
-- an index probe (a hint it re-checks). Each row also carries the database's now and the
-- next due time after it (`next_due_ms`, NULL: none), so a replica can wake for it.
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
-- Read only by the UPDATE, so a claim that finds nothing due (most rounds) draws nothing.
draw AS MATERIALIZED (
    SELECT pg_catalog.uuid_send(pg_catalog.gen_random_uuid()) AS nonce
),
due AS MATERIALIZED (
    SELECT s.project_id, s.trigger_id, s.due_at_ms AS k
      FROM qlsched.trigger_schedules AS s
     WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NOT NULL
       AND COALESCE(s.due_at_ms, -1) <= (SELECT ms FROM now) + $4::bigint
     ORDER BY COALESCE(s.due_at_ms, -1), s.project_id, s.trigger_id
     LIMIT $2
       FOR UPDATE OF s SKIP LOCKED
),
fresh AS MATERIALIZED (
    SELECT s.project_id, s.trigger_id, -1::bigint AS k
      FROM qlsched.trigger_schedules AS s
     WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NULL
     ORDER BY s.project_id, s.trigger_id
     LIMIT $2
       FOR UPDATE OF s SKIP LOCKED
),
expired AS MATERIALIZED (
    SELECT s.project_id, s.trigger_id, COALESCE(s.due_at_ms, -1) AS k
      FROM qlsched.trigger_schedules AS s
     WHERE s.active AND s.claim_token IS NOT NULL
       AND s.claim_expires_at_ms <= (SELECT ms FROM now)
       AND COALESCE(s.due_at_ms, -1) <= (SELECT ms FROM now)
     ORDER BY s.claim_expires_at_ms
     LIMIT $2
       FOR UPDATE OF s SKIP LOCKED
),
-- Uninitialised rows share the budget instead of going first: a quarter of it is theirs
-- (when there are any), then due rows by due time, then more uninitialised rows if room
-- is left. Rejected: NULLs first (a large publish took every slot, and every existing
-- trigger waited until the new ones were initialised).
candidates AS (
    SELECT x.project_id, x.trigger_id, x.k,
           CASE WHEN x.n <= (($2::integer + 3) / 4) THEN 0 ELSE 2 END AS tier, x.n AS pos
      FROM (SELECT f.*, pg_catalog.row_number() OVER (ORDER BY f.project_id, f.trigger_id) AS n
              FROM fresh AS f) AS x
    UNION ALL
    SELECT y.project_id, y.trigger_id, y.k, 1 AS tier,
           pg_catalog.row_number() OVER (ORDER BY y.k, y.project_id, y.trigger_id) AS pos
      FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS y
),
chosen AS (
    SELECT c.project_id, c.trigger_id,
           pg_catalog.row_number() OVER (ORDER BY c.tier, c.pos) AS place
      FROM candidates AS c
     ORDER BY c.tier, c.pos
     LIMIT $2
),
-- The spec is joined inside the UPDATE on the revision the row holds. A publish committed
-- between this statement's snapshot and its row lock makes the lock follow the row to the
-- new revision while the join still reads the old trigger row: the recheck then fails the
-- join and the row is left unclaimed (free again at commit), so a claim never hands back a
-- spec of another revision than the row it locked.
claimed AS (
    UPDATE qlsched.trigger_schedules AS s
       SET claim_owner = $1,
           claim_token = pg_catalog.encode(overlay(draw.nonce PLACING
               pg_catalog.int4send(chosen.place::integer) FROM 13 FOR 4), 'hex')::uuid,
           claim_version = s.claim_version + 1,
           claim_expires_at_ms = GREATEST(now.ms, s.updated_at_ms) + $3,
           state_version = s.state_version + 1,
           updated_at_ms = GREATEST(now.ms, s.updated_at_ms)
      FROM chosen, now, draw, qlsched.triggers AS t
     WHERE s.project_id = chosen.project_id AND s.trigger_id = chosen.trigger_id
       AND t.project_id = s.project_id AND t.trigger_id = s.trigger_id
       AND t.revision = s.trigger_revision
 RETURNING s.project_id, s.trigger_id, s.trigger_revision, s.state_version, s.claim_owner,
           s.claim_token, s.claim_version, s.claim_expires_at_ms, s.next_fire_at_ms,
           s.updated_at_ms, s.ctid, t.cron, t.timezone,
           -- The occurrence a resume left to catch up fires once whatever the grace.
           CASE WHEN s.next_fire_at_ms = s.catch_up_at_ms THEN 'fire_once'
                ELSE t.misfire_policy END AS misfire_policy,
           t.misfire_grace_ms, t.content_digest, t.task_id, t.task_revision,
           t.execution_revision_id, t.dst_gap, t.dst_fold, t.jitter_ms, s.due_at_ms
),
-- The next unclaimed row to fall due after the window of rows claimed ahead (one probe of
-- the claim index): the replica sleeps until it enters that window when that is sooner
-- than its cadence. Not read when the claim took its whole budget (the replica claims
-- again at once): the probe walks every dead index entry before the first live one, and
-- after a mass cursor move (a burst, a publish) that was thousands of pages a claim.
upcoming AS MATERIALIZED (
    SELECT COALESCE(s.due_at_ms, -1) AS k
      FROM qlsched.trigger_schedules AS s
     WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NOT NULL
       AND COALESCE(s.due_at_ms, -1) > (SELECT ms FROM now) + $4::bigint
       AND (SELECT pg_catalog.count(*) FROM claimed) < $2
     ORDER BY COALESCE(s.due_at_ms, -1)
     LIMIT 1
)
-- Always at least one row: with nothing claimed, one row of NULLs but for the clock and
-- the next due time.
SELECT c.project_id, c.trigger_id, c.trigger_revision, c.state_version, c.claim_owner,
       c.claim_token, c.claim_version, c.claim_expires_at_ms, c.next_fire_at_ms,
       c.updated_at_ms, c.ctid::text AS locator, c.cron, c.timezone, c.misfire_policy,
       c.misfire_grace_ms, c.content_digest, c.task_id, c.task_revision,
       c.execution_revision_id, c.dst_gap, c.dst_fold, c.jitter_ms,
       now.ms AS now_ms, (SELECT u.k FROM upcoming AS u) AS next_due_ms
  FROM now
  LEFT JOIN claimed AS c ON true
 ORDER BY COALESCE(c.due_at_ms, -1), c.project_id, c.trigger_id;

-- name: settle
-- Initialize, skip or release one claimed row: one statement, one implicit transaction.
-- The WHERE repeats the whole fence: owner $3, token $4, claim version $5, expiry against
-- the database clock, state version $6, trigger revision $7 and the cursor $8 the decision
-- saw (NULL = uninitialised); the trigger row must still be revision $7 with digest $12, as
-- admit checks it. $9 keeps the cursor (release); else it becomes $10. $11 adds to
-- skipped_total. $13, when not NULL, is why the claim is given back (an admit that could
-- not commit): counted in `failures` and kept as `last_failure`, so a row failing again
-- and again shows as stuck. A cursor leaving NULL (initialize) starts the accounting's
-- window (`decided_from_ms`). `cur` and `spec_ok` are what this statement saw, so a
-- refused write can name the part that failed.
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
cur AS (
    SELECT s.trigger_revision, s.claim_owner, s.claim_token, s.claim_version,
           s.claim_expires_at_ms, s.state_version, s.next_fire_at_ms
      FROM qlsched.trigger_schedules AS s
     WHERE s.project_id = $1 AND s.trigger_id = $2
),
spec AS (
    SELECT EXISTS (SELECT 1 FROM qlsched.triggers AS t
                    WHERE t.project_id = $1 AND t.trigger_id = $2
                      AND t.revision = $7 AND t.content_digest = $12::text) AS ok
),
upd AS (
    UPDATE qlsched.trigger_schedules AS s
       SET next_fire_at_ms = CASE WHEN $9::boolean THEN s.next_fire_at_ms ELSE $10::bigint END,
           skipped_total = s.skipped_total + $11::bigint,
           decided_from_ms = CASE WHEN s.next_fire_at_ms IS NULL AND NOT $9::boolean
                                  THEN $10::bigint ELSE s.decided_from_ms END,
           failures = CASE WHEN $13::text IS NULL THEN s.failures ELSE s.failures + 1 END,
           last_failure = COALESCE($13::text, s.last_failure),
           last_failure_at_ms = CASE WHEN $13::text IS NULL THEN s.last_failure_at_ms
                                     ELSE now.ms END,
           state_version = s.state_version + 1,
           claim_owner = NULL,
           claim_token = NULL,
           claim_expires_at_ms = NULL,
           updated_at_ms = GREATEST(now.ms, s.updated_at_ms)
      FROM now, spec
     WHERE s.project_id = $1 AND s.trigger_id = $2
       AND s.claim_owner = $3 AND s.claim_token = $4 AND s.claim_version = $5
       AND s.claim_expires_at_ms > now.ms AND s.state_version = $6
       AND s.trigger_revision = $7 AND s.next_fire_at_ms IS NOT DISTINCT FROM $8::bigint
       AND spec.ok
 RETURNING s.updated_at_ms
)
SELECT (SELECT u.updated_at_ms FROM upd AS u) AS settled_at_ms, now.ms AS now_ms,
       spec.ok AS spec_ok, cur.trigger_revision, cur.claim_owner, cur.claim_token,
       cur.claim_version, cur.claim_expires_at_ms, cur.state_version, cur.next_fire_at_ms
  FROM now CROSS JOIN spec LEFT JOIN cur ON true;

-- name: due_backlog
-- Active rows due now by the database clock, claimed or not (the backlog gauge).
SELECT pg_catalog.count(*)::bigint
  FROM qlsched.trigger_schedules AS s
 WHERE s.active
   AND COALESCE(s.due_at_ms, -1)
       <= (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint;

-- fragment: schedule_view_columns
-- A schedule row `s` with its trigger `t` as status and /v1/schedules show it
-- (core.store.ScheduleView), read at the database's clock: both its lists, the
-- first page and the pages after a key, select these.
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.active, t.cron, t.timezone,
       s.next_fire_at_ms, s.last_scheduled_at_ms, s.claim_owner, s.claim_expires_at_ms,
       s.skipped_total, s.coalesced_total, s.overlap_skipped_total,
       s.deadline_cancelled_total,
       (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms,
       t.dst_gap, t.dst_fold, s.jitter_ms, s.due_at_ms

-- name: list_schedules
-- Schedule rows with their trigger spec for status and /v1/schedules; $1 = row limit.
-- include: schedule_view_columns
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 ORDER BY s.project_id, s.trigger_id
 LIMIT $1;
