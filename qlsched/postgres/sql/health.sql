-- name: refused_triggers
-- Active schedule rows every admit refuses until an operator re-publishes, with the reason
-- (admit's lasting checks, as 'outcome:part'; payload digests are not re-computed here).
-- $1 = row limit.
SELECT h.project_id, h.trigger_id, h.reason
  FROM (SELECT s.project_id, s.trigger_id,
               CASE
                 WHEN p.state IS DISTINCT FROM 'active' THEN 'inactive:project_archived'
                 WHEN t.revision IS DISTINCT FROM s.trigger_revision
                   THEN 'revision_changed:trigger'
                 WHEN NOT t.enabled THEN 'inactive:trigger_disabled'
                 WHEN k.revision IS DISTINCT FROM t.task_revision THEN 'revision_changed:task'
                 WHEN e.execution_revision_id IS NULL OR e.task_id <> t.task_id
                   OR e.task_revision <> t.task_revision THEN 'revision_changed:execution'
                 WHEN e.executor_kind <> 'remote_worker' THEN 'digest_invalid:executor'
                 WHEN k.content_digest <> e.digest THEN 'digest_invalid:task'
               END AS reason
          FROM qlsched.trigger_schedules AS s
          LEFT JOIN qlsched.projects AS p ON p.project_id = s.project_id
          LEFT JOIN qlsched.triggers AS t
            ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
          LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
          LEFT JOIN qlsched.execution_revisions AS e
            ON e.execution_revision_id = t.execution_revision_id
         WHERE s.active) AS h
 WHERE h.reason IS NOT NULL
 ORDER BY h.project_id, h.trigger_id
 LIMIT $1;
