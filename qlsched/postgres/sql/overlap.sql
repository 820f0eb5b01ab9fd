-- The overlap policy's writes beside an admit (docs/contract.md §13): shared by the cron
-- admit and the requests' admit, so both cancel the same way.

-- fragment: cancel_others
-- Given `overlap_new` (the Runs just admitted under `cancel_other`: run_id, project_id,
-- trigger_id, at_ms, actor), cancel the trigger's other unfinished Runs: a held or queued
-- one at once with its pristine Attempt, a running one by asking its worker (seen at its
-- next heartbeat). Each with its event, numbered after the Run's last. The new Runs are not
-- in this statement's snapshot, so they are never among them. Each `EXISTS` is a one-time
-- gate: with no `cancel_other` Run, nothing is read (a generic plan built on near-empty
-- statistics walked all of `attempts` in every admit; docs/performance.md, the storm).
-- Both reads are written so that no plan can widen them, whatever the statistics (none on
-- a new cluster, or taken while the tables were nearly empty): the unfinished Runs by a
-- row range over `runs_unfinished_idx`'s three columns (equalities on project and trigger
-- let a plan read the trigger's whole history through `runs_trigger_idx`), and each
-- cancelled Run's Attempt by its Run alone, the state checked above an `OFFSET 0` fence
-- (with `state = 'claimed'` beside it, a plan ANDed the Run's key with all of
-- `attempts_live_idx`, read once per cancelled Run) and the row then reached by tuple id.
others AS (
    UPDATE qlsched.runs AS o
       SET state = CASE WHEN o.state = 'running' THEN 'running' ELSE 'cancelled' END,
           cancel_requested = true, cancel_reason = 'overlap',
           finished_at_ms = CASE WHEN o.state = 'running' THEN NULL ELSE w.at_ms END
      FROM overlap_new AS w
     WHERE (o.project_id, o.trigger_id, o.state) >= (w.project_id, w.trigger_id, 'held')
       AND (o.project_id, o.trigger_id, o.state) <= (w.project_id, w.trigger_id, 'running')
       AND o.state IN ('held', 'queued', 'running') AND NOT o.cancel_requested
       AND EXISTS (SELECT FROM overlap_new)
 RETURNING o.run_id, o.state, w.at_ms, w.actor
),
others_attempts AS (
    UPDATE qlsched.attempts AS x
       SET state = 'cancelled', result = 'overlap', finished_at_ms = o.at_ms
      FROM others AS o
     CROSS JOIN LATERAL (
            SELECT q.tid FROM (SELECT y.ctid AS tid, y.state, y.worker_id
                                 FROM qlsched.attempts AS y
                                WHERE y.run_id = o.run_id OFFSET 0) AS q
             WHERE q.state = 'claimed' AND q.worker_id IS NULL) AS p
     WHERE x.ctid = p.tid AND o.state = 'cancelled' AND EXISTS (SELECT FROM others)
),
others_events AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.gen_random_uuid(), o.run_id,
           (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
             WHERE e.run_id = o.run_id) + 1,
           CASE WHEN o.state = 'cancelled' THEN 'run.cancelled'
                ELSE 'run.cancel_requested' END,
           o.at_ms, o.actor
      FROM others AS o
),

-- name: release_held
-- Release up to $1 held Runs whose trigger has no queued or running Run (of the triggers in
-- arrays $3 projects, $4 ids; NULL: any), oldest first, SKIP LOCKED: each becomes `queued`
-- in database time, with its trigger's start deadline from now, and a `run.released`
-- event by actor $2. Exactly once per Run: two releasers lock it in turn, and the second
-- finds it no longer held. Returns the released Runs.
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
),
picked AS (
    SELECT h.run_id
      FROM qlsched.runs AS h
     WHERE h.state = 'held'
       AND ($3::text[] IS NULL
            OR (h.project_id, h.trigger_id) IN (
                   SELECT k.p, k.t
                     FROM ROWS FROM (pg_catalog.unnest($3::text[]),
                                     pg_catalog.unnest($4::text[])) AS k(p, t)))
       AND NOT EXISTS (SELECT 1 FROM qlsched.runs AS u
                        WHERE u.project_id = h.project_id AND u.trigger_id = h.trigger_id
                          AND u.state IN ('queued', 'running'))
     ORDER BY h.created_at_ms, h.run_id
     LIMIT $1
       FOR UPDATE OF h SKIP LOCKED
),
moved AS (
    UPDATE qlsched.runs AS r
       SET state = 'queued', queued_at_ms = c.now_ms,
           start_by_ms = c.now_ms + t.start_deadline_ms
      FROM picked AS p, clock AS c, qlsched.triggers AS t
     WHERE r.run_id = p.run_id AND r.state = 'held'
       AND t.project_id = r.project_id AND t.trigger_id = r.trigger_id
 RETURNING r.run_id, r.project_id, r.trigger_id, c.now_ms
),
events AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.gen_random_uuid(), m.run_id,
           (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
             WHERE e.run_id = m.run_id) + 1,
           'run.released', m.now_ms, $2
      FROM moved AS m
)
SELECT m.run_id::text, m.project_id, m.trigger_id FROM moved AS m ORDER BY m.run_id;

-- name: cancel_unstarted
-- Cancel up to $1 queued Runs no worker started by their start deadline (database time),
-- soonest deadline first, SKIP LOCKED (a worker's claim locks the same rows: one of the
-- two gets each Run): the Run and its pristine Attempt `cancelled`, reason
-- `start_deadline`, a `run.cancelled` event by actor $2, and each counted on its trigger's
-- schedule row. Returns the cancelled Runs.
WITH clock AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS now_ms
),
due AS (
    SELECT r.run_id
      FROM qlsched.runs AS r
     WHERE r.state = 'queued' AND r.started_at_ms IS NULL AND r.start_by_ms IS NOT NULL
       AND r.start_by_ms <= (SELECT c.now_ms FROM clock AS c)
     ORDER BY r.start_by_ms
     LIMIT $1
       FOR UPDATE OF r SKIP LOCKED
),
moved AS (
    UPDATE qlsched.runs AS r
       SET state = 'cancelled', cancel_reason = 'start_deadline', finished_at_ms = c.now_ms
      FROM due AS d, clock AS c
     WHERE r.run_id = d.run_id AND r.state = 'queued' AND r.started_at_ms IS NULL
 RETURNING r.run_id, r.project_id, r.trigger_id, c.now_ms
),
attempts AS (
    UPDATE qlsched.attempts AS a
       SET state = 'cancelled', result = 'start_deadline', finished_at_ms = m.now_ms
      FROM moved AS m
     WHERE a.run_id = m.run_id AND a.state = 'claimed' AND a.worker_id IS NULL
),
events AS (
    INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
    SELECT pg_catalog.gen_random_uuid(), m.run_id,
           (SELECT pg_catalog.max(e.seq) FROM qlsched.run_events AS e
             WHERE e.run_id = m.run_id) + 1,
           'run.cancelled', m.now_ms, $2
      FROM moved AS m
),
counted AS (
    UPDATE qlsched.trigger_schedules AS s
       SET deadline_cancelled_total = s.deadline_cancelled_total + n.n
      FROM (SELECT m.project_id, m.trigger_id, pg_catalog.count(*) AS n
              FROM moved AS m GROUP BY m.project_id, m.trigger_id) AS n
     WHERE s.project_id = n.project_id AND s.trigger_id = n.trigger_id
)
SELECT m.run_id::text, m.project_id, m.trigger_id FROM moved AS m ORDER BY m.run_id;
