-- Observability reads whose cost must not grow with the table (issue #20 item 7): each walks
-- an index for a bounded number of entries, never the whole of trigger_schedules or runs.

-- name: due_backlog_bounded
-- Active rows due now by the database clock, claimed or not, counted up to $1 rows:
-- uninitialised ones in trigger_schedules_fresh_idx order, due ones in
-- trigger_schedules_claim_idx order, claimed ones in trigger_schedules_expiry_idx order
-- (the ORDER BY keeps the planner on each index).
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
)
SELECT pg_catalog.count(*)::bigint
  FROM ((SELECT 1
           FROM qlsched.trigger_schedules AS s
          WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NULL
          ORDER BY s.project_id, s.trigger_id
          LIMIT $1)
        UNION ALL
        (SELECT 1
           FROM qlsched.trigger_schedules AS s
          WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NOT NULL
            AND COALESCE(s.due_at_ms, -1) <= (SELECT ms FROM now)
          ORDER BY COALESCE(s.due_at_ms, -1)
          LIMIT $1)
        UNION ALL
        (SELECT 1
           FROM qlsched.trigger_schedules AS s
          WHERE s.active AND s.claim_token IS NOT NULL
            AND COALESCE(s.due_at_ms, -1) <= (SELECT ms FROM now)
          ORDER BY s.claim_expires_at_ms
          LIMIT $1)
        LIMIT $1) AS due;

-- name: list_schedules_after
-- The page of /v1/schedules after key ($1 project, $2 trigger), in key order, $3 rows at
-- most. The page is cut from the primary key first, then each row finds its trigger by key
-- (LIMIT 1 keeps that lookup per row: a generic plan, not knowing $3, would hash the whole
-- triggers table), so a page deep in the table costs what the first one does.
-- include: schedule_view_columns
  FROM (SELECT *
          FROM qlsched.trigger_schedules AS p
         WHERE (p.project_id, p.trigger_id) > ($1::text, $2::text)
         ORDER BY p.project_id, p.trigger_id
         LIMIT $3) AS s
 CROSS JOIN LATERAL (SELECT g.cron, g.timezone, g.dst_gap, g.dst_fold
                       FROM qlsched.triggers AS g
                      WHERE g.project_id = s.project_id AND g.trigger_id = s.trigger_id
                      LIMIT 1) AS t
 ORDER BY s.project_id, s.trigger_id;

-- name: refused_due_triggers
-- refused_triggers (health.sql) among the rows an admit can meet: the $2 longest-due
-- unclaimed rows and the $2 claimed rows whose claims expire first (a refused row keeps its
-- old cursor and its claim is left to expire, so it stays among them). $1 = row limit.
-- Each row finds its trigger by key (LIMIT 1: a generic plan would hash the whole table).
WITH now AS MATERIALIZED (
    SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms
),
due AS (
    (SELECT s.project_id, s.trigger_id, s.trigger_revision
       FROM qlsched.trigger_schedules AS s
      WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NULL
      ORDER BY s.project_id, s.trigger_id
      LIMIT $2)
    UNION ALL
    (SELECT s.project_id, s.trigger_id, s.trigger_revision
       FROM qlsched.trigger_schedules AS s
      WHERE s.active AND s.claim_token IS NULL AND s.due_at_ms IS NOT NULL
        AND COALESCE(s.due_at_ms, -1) <= (SELECT ms FROM now)
      ORDER BY COALESCE(s.due_at_ms, -1), s.project_id, s.trigger_id
      LIMIT $2)
    UNION ALL
    (SELECT s.project_id, s.trigger_id, s.trigger_revision
       FROM qlsched.trigger_schedules AS s
      WHERE s.active AND s.claim_token IS NOT NULL
      ORDER BY s.claim_expires_at_ms
      LIMIT $2)
)
SELECT h.project_id, h.trigger_id, h.reason
  FROM (SELECT d.project_id, d.trigger_id,
               -- include: lasting_refusal
          FROM due AS d
          LEFT JOIN qlsched.projects AS p ON p.project_id = d.project_id
          LEFT JOIN LATERAL (SELECT g.*
                               FROM qlsched.triggers AS g
                              WHERE g.project_id = d.project_id AND g.trigger_id = d.trigger_id
                              LIMIT 1) AS t ON true
          LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
          LEFT JOIN qlsched.execution_revisions AS e
            ON e.execution_revision_id = t.execution_revision_id) AS h
 WHERE h.reason IS NOT NULL
 ORDER BY h.project_id, h.trigger_id
 LIMIT $1;
