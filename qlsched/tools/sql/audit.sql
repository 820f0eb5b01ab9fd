-- The set-based exactly-once audit (qlsched.tools.audit): the checks of verify_exactly_once
-- as a few statements over the whole database, which return counts and a bounded sample of
-- offending keys instead of every Run (a million-Run history audits in seconds).
--
-- Parameters shared by both statements: $1 project ids, $2 trigger ids, $3 first cursors
-- (parallel arrays, the caller's observed first cursor per trigger; a trigger not listed
-- starts at its earliest Run). Run both in one REPEATABLE READ snapshot.

-- name: audit_work_mem
-- Inside the audit's transaction: room for its hash aggregates over every Run, Attempt and
-- event in memory (at the default 4 MB a million-Run audit spills them to disk).
SET LOCAL work_mem = '256MB';

-- fragment: audit_heads
-- CTEs: given, backfills, backfilled, cron_runs (every Run but trigger-now ones, with
-- whether a recorded backfill range of its trigger and revision covers it), span, heads (per
-- schedule row: its spec, counters and window [first_ms, end_ms), as verify_exactly_once
-- computes them).
given AS (
    SELECT g.project_id, g.trigger_id, g.first_ms
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                      pg_catalog.unnest($3::bigint[])) AS g(project_id, trigger_id, first_ms)
),
backfills AS (
    SELECT q.project_id, q.trigger_id, q.trigger_revision, q.from_ms, q.to_ms
      FROM qlsched.control_requests AS q
     WHERE q.kind = 'backfill'
),
backfilled AS MATERIALIZED (
    -- Few ranges: each walks runs_trigger_idx; the Runs are then tested by one hashed set.
    SELECT r.run_id
      FROM backfills AS b
      JOIN qlsched.runs AS r
        ON r.project_id = b.project_id AND r.trigger_id = b.trigger_id
       AND r.trigger_revision = b.trigger_revision
       AND r.scheduled_for_ms BETWEEN b.from_ms AND b.to_ms
),
cron_runs AS MATERIALIZED (
    SELECT r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
           r.run_id IN (SELECT f.run_id FROM backfilled AS f) AS backfilled
      FROM qlsched.runs AS r
     WHERE r.idempotency_key NOT LIKE 'ql3:manual:%'
),
span AS (
    SELECT c.project_id, c.trigger_id, c.trigger_revision,
           pg_catalog.min(c.scheduled_for_ms) FILTER (WHERE NOT c.backfilled) AS earliest_ms,
           pg_catalog.max(c.scheduled_for_ms) AS latest_ms
      FROM cron_runs AS c
     GROUP BY c.project_id, c.trigger_id, c.trigger_revision
),
heads AS MATERIALIZED (
    SELECT s.project_id, s.trigger_id, s.trigger_revision, s.skipped_total, s.coalesced_total,
           t.cron, t.timezone, t.dst_gap, t.dst_fold,
           LEAST(g.first_ms, w.earliest_ms) AS first_ms,
           COALESCE(s.next_fire_at_ms, w.latest_ms + 1) AS end_ms
      FROM qlsched.trigger_schedules AS s
      JOIN qlsched.triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
      LEFT JOIN given AS g ON g.project_id = s.project_id AND g.trigger_id = s.trigger_id
      LEFT JOIN span AS w
        ON w.project_id = s.project_id AND w.trigger_id = s.trigger_id
       AND w.trigger_revision = s.trigger_revision
)

-- name: audit_windows
-- The distinct windows to enumerate: (cron, zone, DST policy, first, end) and how many
-- triggers share each. The caller enumerates each once with core's cron code.
WITH
    -- include: audit_heads
SELECT h.cron, h.timezone, h.dst_gap, h.dst_fold, h.first_ms, h.end_ms,
       pg_catalog.count(*)::bigint AS triggers
  FROM heads AS h
 WHERE h.first_ms IS NOT NULL AND h.end_ms IS NOT NULL
 GROUP BY h.cron, h.timezone, h.dst_gap, h.dst_fold, h.first_ms, h.end_ms
 ORDER BY h.cron, h.timezone, h.dst_gap, h.dst_fold, h.first_ms, h.end_ms;

-- name: audit_counts
-- The audit's counts, one row. $4..$9 the windows of audit_windows (parallel arrays, in
-- its order), $10/$11 their occurrences (window ordinal from 1, occurrence ms), $12 the
-- sample size. Duplicates: occurrences with more than one cron-keyed Run (trigger-now Runs
-- have keys of their own, one per request). Lost: per trigger, expected occurrences without
-- a Run beyond what its skipped and coalesced counters account for. Unexpected: Runs of the
-- current revision at no expected occurrence and in no recorded backfill range, Runs of a
-- trigger with no schedule row, and trigger-now Runs that match no recorded request (key,
-- revision and scheduled_for = the request's recording time). Shape: Runs with a wrong
-- queue time, fence or key, Attempts other than one pristine, events other than the two
-- admission ones (counted per Run).
WITH
    -- include: audit_heads
,
windows AS (
    SELECT *
      FROM ROWS FROM (pg_catalog.unnest($4::text[]), pg_catalog.unnest($5::text[]),
                      pg_catalog.unnest($6::text[]), pg_catalog.unnest($7::text[]),
                      pg_catalog.unnest($8::bigint[]), pg_catalog.unnest($9::bigint[]))
           WITH ORDINALITY AS w(cron, timezone, dst_gap, dst_fold, first_ms, end_ms, ord)
),
occurrences AS MATERIALIZED (
    SELECT o.ord, o.at_ms
      FROM ROWS FROM (pg_catalog.unnest($10::bigint[]), pg_catalog.unnest($11::bigint[]))
           AS o(ord, at_ms)
),
sized AS (
    SELECT o.ord, pg_catalog.count(*)::bigint AS n FROM occurrences AS o GROUP BY o.ord
),
placed AS MATERIALIZED (
    SELECT h.project_id, h.trigger_id, h.trigger_revision, h.skipped_total,
           h.coalesced_total, w.ord, COALESCE(z.n, 0) AS expected
      FROM heads AS h
      LEFT JOIN windows AS w
        ON w.cron = h.cron AND w.timezone = h.timezone AND w.dst_gap = h.dst_gap
       AND w.dst_fold = h.dst_fold AND w.first_ms = h.first_ms AND w.end_ms = h.end_ms
      LEFT JOIN sized AS z ON z.ord = w.ord
),
seen AS MATERIALIZED (
    SELECT c.project_id, c.trigger_id, c.scheduled_for_ms,
           pg_catalog.bool_or(c.backfilled) AS backfilled,
           pg_catalog.bool_or(o.at_ms IS NOT NULL) AS expected
      FROM cron_runs AS c
      JOIN placed AS p
        ON p.project_id = c.project_id AND p.trigger_id = c.trigger_id
       AND p.trigger_revision = c.trigger_revision
      LEFT JOIN occurrences AS o ON o.ord = p.ord AND o.at_ms = c.scheduled_for_ms
     GROUP BY c.project_id, c.trigger_id, c.scheduled_for_ms
),
hits AS (
    SELECT c.project_id, c.trigger_id, pg_catalog.count(*) FILTER (WHERE c.expected) AS n
      FROM seen AS c
     GROUP BY c.project_id, c.trigger_id
),
losses AS MATERIALIZED (
    SELECT p.project_id, p.trigger_id,
           GREATEST(0, p.expected - COALESCE(x.n, 0) - p.skipped_total - p.coalesced_total)
               AS lost
      FROM placed AS p
      LEFT JOIN hits AS x ON x.project_id = p.project_id AND x.trigger_id = p.trigger_id
),
manual AS MATERIALIZED (
    SELECT r.project_id, r.trigger_id, r.scheduled_for_ms,
           EXISTS (SELECT 1 FROM qlsched.control_requests AS q
                    WHERE q.kind = 'trigger' AND q.project_id = r.project_id
                      AND q.trigger_id = r.trigger_id
                      AND q.trigger_revision = r.trigger_revision
                      AND q.created_at_ms = r.scheduled_for_ms
                      AND r.idempotency_key = 'ql3:manual:v1:' || q.trigger_id || ':'
                          || q.trigger_revision || ':' || q.request_id) AS requested
      FROM qlsched.runs AS r
     WHERE r.idempotency_key LIKE 'ql3:manual:%'
),
unexpected AS MATERIALIZED (
    SELECT c.project_id, c.trigger_id, c.scheduled_for_ms
      FROM seen AS c
     WHERE NOT c.expected AND NOT c.backfilled
    UNION ALL
    SELECT c.project_id, c.trigger_id, c.scheduled_for_ms
      FROM cron_runs AS c
     WHERE NOT EXISTS (SELECT 1 FROM qlsched.trigger_schedules AS s
                        WHERE s.project_id = c.project_id AND s.trigger_id = c.trigger_id)
    UNION ALL
    SELECT m.project_id, m.trigger_id, m.scheduled_for_ms FROM manual AS m WHERE NOT m.requested
),
duplicates AS MATERIALIZED (
    SELECT c.project_id, c.trigger_id, c.scheduled_for_ms
      FROM cron_runs AS c
     GROUP BY c.project_id, c.trigger_id, c.scheduled_for_ms
    HAVING pg_catalog.count(*) > 1
),
-- include: admission_shape_ctes
,
shape AS MATERIALIZED (
    SELECT r.run_id,
           (r.queued_at_ms IS NULL OR r.queued_at_ms < r.scheduled_for_ms
            OR COALESCE(r.admitted_by_owner, '') = '' OR r.admitted_claim_token IS NULL
            OR COALESCE(r.admitted_claim_version, 0) < 1
            OR (r.idempotency_key NOT LIKE 'ql3:manual:%'
                AND r.idempotency_key IS DISTINCT FROM 'ql3:cron:v1:' || r.trigger_id || ':'
                    || r.trigger_revision || ':' || r.scheduled_for_ms)) AS bad_run,
           (COALESCE(a.attempts, 0) <> 1 OR COALESCE(a.pristine, 0) <> 1) AS bad_attempt,
           (COALESCE(e.events, 0) <> 2 OR COALESCE(e.admission_events, 0) <> 2) AS bad_event
      FROM qlsched.runs AS r
      LEFT JOIN a ON a.run_id = r.run_id
      LEFT JOIN e ON e.run_id = r.run_id
)
SELECT (SELECT pg_catalog.count(*) FROM qlsched.runs)::bigint AS runs,
       (SELECT pg_catalog.count(*) FROM duplicates)::bigint AS duplicates,
       (SELECT pg_catalog.sum(l.lost) FROM losses AS l)::bigint AS lost,
       (SELECT pg_catalog.count(*) FROM unexpected)::bigint AS unexpected,
       (SELECT pg_catalog.count(*) FILTER (WHERE s.bad_run) FROM shape AS s)::bigint
           AS bad_runs,
       (SELECT pg_catalog.count(*) FILTER (WHERE s.bad_attempt) FROM shape AS s)::bigint
           AS bad_attempts,
       (SELECT pg_catalog.count(*) FILTER (WHERE s.bad_event) FROM shape AS s)::bigint
           AS bad_events,
       (SELECT pg_catalog.count(*) FILTER (WHERE m.requested) FROM manual AS m)::bigint
           AS manual,
       (SELECT pg_catalog.count(*) FILTER (WHERE c.backfilled) FROM cron_runs AS c)::bigint
           AS backfilled,
       (SELECT pg_catalog.sum(p.skipped_total) FROM placed AS p)::bigint AS skipped,
       (SELECT pg_catalog.sum(p.coalesced_total) FROM placed AS p)::bigint AS coalesced,
       (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(d.project_id, d.trigger_id,
                                                                 d.scheduled_for_ms))
          FROM (SELECT * FROM duplicates ORDER BY 1, 2, 3 LIMIT $12) AS d)::text
           AS duplicate_sample,
       (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(l.project_id, l.trigger_id,
                                                                 l.lost))
          FROM (SELECT * FROM losses WHERE lost > 0 ORDER BY 1, 2 LIMIT $12) AS l)::text
           AS lost_sample,
       (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(u.project_id, u.trigger_id,
                                                                 u.scheduled_for_ms))
          FROM (SELECT * FROM unexpected ORDER BY 1, 2, 3 LIMIT $12) AS u)::text
           AS unexpected_sample,
       (SELECT pg_catalog.array_agg(b.run_id)
          FROM (SELECT s.run_id FROM shape AS s
                 WHERE s.bad_run OR s.bad_attempt OR s.bad_event
                 ORDER BY s.run_id LIMIT $12) AS b) AS malformed_sample;
