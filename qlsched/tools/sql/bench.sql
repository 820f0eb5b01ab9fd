-- The benchmark's own statements (`qlsched bench`, qlsched.tools.bench_data). They run as
-- the superuser on a database the bench created for itself (or on its own embedded server),
-- never on a deployment's: they truncate, bulk-load and move cursors behind the protocol's
-- back. The statements the bench measures are the product's own (`claim`, `admit`).
--
-- Bulk-loaded triggers are t0000001 .. tNNNNNNN ("t" and the 7-digit ordinal i, from 1), all
-- of one project and one task, so a row's ordinal is `substr(trigger_id, 2)::int`.

-- name: bench_reset
-- Empty every qlsched table (one statement: TRUNCATE takes the foreign keys in one go).
-- Roles, grants and the migration ledger stay.
TRUNCATE qlsched.recovery_marks, qlsched.run_events, qlsched.attempts, qlsched.runs,
         qlsched.control_requests, qlsched.schedule_actions, qlsched.schedule_action_totals,
         qlsched.trigger_schedules, qlsched.triggers, qlsched.execution_revisions,
         qlsched.tasks, qlsched.projects;

-- name: bench_reset_runs
-- Empty the history (Runs, Attempts, events, recovery marks, requests, actions) and keep
-- the projects, tasks, triggers and schedule rows: a phase that reuses the triggers the
-- previous one loaded starts from no Runs.
TRUNCATE qlsched.recovery_marks, qlsched.run_events, qlsched.attempts, qlsched.runs,
         qlsched.control_requests, qlsched.schedule_actions, qlsched.schedule_action_totals;

-- name: bench_loaded_triggers
-- ($1 project) how many triggers it has, and how many of them are what bench_load_triggers
-- writes for cron $2, misfire policy $3 and grace $4 ms (enabled, revision 1, UTC).
SELECT pg_catalog.count(*)::bigint AS triggers,
       (pg_catalog.count(*) FILTER (
           WHERE t.cron = $2::text AND t.misfire_policy = $3::text
             AND t.misfire_grace_ms = $4::bigint AND t.enabled AND t.revision = 1
             AND t.timezone = 'UTC' AND t.kind = 'cron'))::bigint AS matching
  FROM qlsched.triggers AS t
 WHERE t.project_id = $1::text;

-- name: bench_truncate_schedules
-- Empty trigger_schedules only (nothing references it), to reload it in another state.
TRUNCATE qlsched.trigger_schedules;

-- name: bench_fast_load
-- Inside the load's transaction: skip foreign-key triggers (superuser only). Every row the
-- bulk loads write references rows the same load wrote, so nothing goes unchecked that could
-- fail. Checking 1M rows against three parents costs more than writing them.
SET LOCAL session_replication_role = replica;

-- name: bench_load_triggers
-- $3 enabled cron triggers t0000001 .. of project $1 on task $2 (its current revision and
-- pinned execution revision, as publish pins them). Trigger i gets cron
-- $4[1 + (i - 1) % cardinality($4)] in UTC, misfire policy $5, grace $6 ms, created at $7.
-- content_digest is a per-row SHA-256, not publish's canonical one: claim and admit compare
-- it with itself, nothing on the hot path recomputes it.
INSERT INTO qlsched.triggers (project_id, trigger_id, revision, kind, enabled, cron, timezone,
                              misfire_policy, misfire_grace_ms, task_id, task_revision,
                              execution_revision_id, content_digest, created_at_ms,
                              updated_at_ms)
SELECT $1::text, g.trigger_id, 1, 'cron', true, g.cron, 'UTC', $5::text, $6::bigint,
       k.task_id, k.revision, e.execution_revision_id,
       pg_catalog.encode(
           pg_catalog.sha256(pg_catalog.convert_to(g.trigger_id || ' ' || g.cron, 'UTF8')),
           'hex'),
       $7::bigint, $7::bigint
  FROM (SELECT 't' || pg_catalog.lpad(i::text, 7, '0') AS trigger_id,
               ($4::text[])[1 + (i - 1) % pg_catalog.cardinality($4::text[])] AS cron
          FROM pg_catalog.generate_series(1, $3::int) AS i) AS g
 CROSS JOIN qlsched.tasks AS k
  JOIN qlsched.execution_revisions AS e
    ON e.project_id = k.project_id AND e.task_id = k.task_id AND e.task_revision = k.revision
 WHERE k.project_id = $1::text AND k.task_id = $2::text;

-- name: bench_load_schedules
-- The schedule rows of triggers t0000001 .. t<$2> of project $1, in a chosen state (the row
-- publish inserts, revision 1). Row i falls in bucket b = (i - 1) % 100, so every state is
-- spread evenly over the claim order:
--   b <  $6           inactive (active = false: project archived or trigger disabled),
--   b <  $9           paused (inactive, paused at $7, as `qlsched pause` leaves the row),
--   b <  $4           due at cursor $3, otherwise not due: cursor $8 + i (distinct, future),
--   due and b >= $5   validly claimed by `bench-holder` (lease until $7 + 1 h).
-- $7 = now (ms), the rows' updated_at_ms. $4 = 0 / $5 = 100 / $6 = 0 / $9 = 0 turn a part off.
INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision, active,
                                       next_fire_at_ms, state_version, claim_owner,
                                       claim_token, claim_version, claim_expires_at_ms,
                                       updated_at_ms, paused_at_ms)
SELECT $1::text, g.trigger_id, 1, g.b >= $6::int AND g.b >= $9::int,
       CASE WHEN g.b < $4::int THEN $3::bigint ELSE $8::bigint + g.i END,
       1,
       CASE WHEN g.held THEN 'bench-holder' END,
       CASE WHEN g.held THEN pg_catalog.gen_random_uuid() END,
       CASE WHEN g.held THEN 1 ELSE 0 END,
       CASE WHEN g.held THEN $7::bigint + 3600000 END,
       $7::bigint,
       CASE WHEN g.b < $9::int THEN $7::bigint END
  FROM (SELECT i, (i - 1) % 100 AS b,
               (i - 1) % 100 < $4::int AND (i - 1) % 100 >= $5::int AS held,
               't' || pg_catalog.lpad(i::text, 7, '0') AS trigger_id
          FROM pg_catalog.generate_series(1, $2::int) AS i) AS g;

-- name: bench_set_cursors
-- Move the cursor of every schedule row of project $1 to $2[1 + (i - 1) % cardinality($2)]
-- (i = the trigger's ordinal) in one statement, so all rows change at one commit. The state
-- version moves as publish moves it, so a claim taken before (none is expected) fails its
-- fence instead of admitting against a cursor it never saw. Returns the rows moved.
WITH moved AS (
    UPDATE qlsched.trigger_schedules AS s
       SET next_fire_at_ms = ($2::bigint[])[
               1 + (pg_catalog.substr(s.trigger_id, 2)::int - 1)
                   % pg_catalog.cardinality($2::bigint[])],
           state_version = s.state_version + 1,
           updated_at_ms = GREATEST(s.updated_at_ms,
               (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint)
     WHERE s.project_id = $1::text
 RETURNING 1
)
SELECT pg_catalog.count(*)::bigint FROM moved;

-- name: bench_vacuum
-- Fresh statistics and visibility map after a bulk load (outside a transaction block).
VACUUM (ANALYZE) qlsched.triggers, qlsched.trigger_schedules;

-- name: bench_checkpoint
-- Write the load's dirty pages now (superuser): a checkpoint is not due inside the next
-- measurement, and every measured phase starts from the same WAL state.
CHECKPOINT;

-- name: bench_round_trip
-- The bare round trip the claim latency is shown against.
SELECT 1;

-- name: bench_now_ms
-- The database clock (ms), the only clock the bench's timings of the database use.
SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint;

-- name: bench_server_facts
-- The server's version and the settings that shape the figures.
SELECT pg_catalog.current_setting('server_version') AS version,
       pg_catalog.current_setting('shared_buffers') AS shared_buffers,
       pg_catalog.current_setting('fsync') AS fsync,
       pg_catalog.current_setting('synchronous_commit') AS synchronous_commit,
       pg_catalog.current_setting('max_connections') AS max_connections,
       pg_catalog.current_setting('default_transaction_isolation') AS isolation;

-- name: bench_sessions_of
-- Sessions of role $1 still connected to this database.
SELECT pg_catalog.count(*)::bigint
  FROM pg_catalog.pg_stat_activity AS a
 WHERE a.datname = pg_catalog.current_database() AND a.usename = $1::text;

-- name: bench_run_count
-- Runs whose occurrence lies in [$1, $2] (ms).
SELECT pg_catalog.count(*)::bigint
  FROM qlsched.runs AS r
 WHERE r.scheduled_for_ms BETWEEN $1::bigint AND $2::bigint;

-- name: bench_runs_window
-- Runs whose occurrence lies in [$1, $2] (ms): how many, the first and last queue time,
-- and the schedule lag (queued_at_ms - scheduled_for_ms, both database time) at the 50th,
-- 95th and 99th percentile and its maximum.
SELECT pg_catalog.count(*)::bigint AS runs,
       pg_catalog.min(r.queued_at_ms) AS first_queued_ms,
       pg_catalog.max(r.queued_at_ms) AS last_queued_ms,
       pg_catalog.percentile_disc(ARRAY[0.5, 0.95, 0.99]::double precision[])
           WITHIN GROUP (ORDER BY r.queued_at_ms - r.scheduled_for_ms) AS lag_ms,
       pg_catalog.max(r.queued_at_ms - r.scheduled_for_ms) AS lag_max_ms
  FROM qlsched.runs AS r
 WHERE r.scheduled_for_ms BETWEEN $1::bigint AND $2::bigint;

-- name: bench_missed_totals
-- Occurrences of project $1's triggers skipped or coalesced so far (summed counters).
SELECT COALESCE(pg_catalog.sum(s.skipped_total + s.coalesced_total), 0)::bigint
  FROM qlsched.trigger_schedules AS s
 WHERE s.project_id = $1;

-- name: bench_initialised
-- Project $1's schedule rows with a cursor (initialised).
SELECT pg_catalog.count(*)::bigint
  FROM qlsched.trigger_schedules AS s
 WHERE s.project_id = $1 AND s.next_fire_at_ms IS NOT NULL;
