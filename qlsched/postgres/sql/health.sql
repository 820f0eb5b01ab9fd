-- fragment: lasting_refusal
-- Admit's lasting checks as 'outcome:part' (NULL: none fails) for schedule row d joined to
-- its project p, trigger t, task k and execution revision e; payload digests are not
-- re-computed here.
CASE
  WHEN p.state IS DISTINCT FROM 'active' THEN 'inactive:project_archived'
  WHEN t.revision IS DISTINCT FROM d.trigger_revision
    THEN 'revision_changed:trigger'
  WHEN NOT t.enabled THEN 'inactive:trigger_disabled'
  WHEN k.revision IS DISTINCT FROM t.task_revision THEN 'revision_changed:task'
  WHEN e.execution_revision_id IS NULL OR e.task_id <> t.task_id
    OR e.task_revision <> t.task_revision THEN 'revision_changed:execution'
  WHEN e.executor_kind <> 'remote_worker' THEN 'digest_invalid:executor'
  WHEN k.content_digest <> e.digest THEN 'digest_invalid:task'
END AS reason

-- name: refused_triggers
-- Active schedule rows every admit refuses until an operator re-publishes, with the reason
-- (lasting_refusal).
-- $1 = row limit.
SELECT h.project_id, h.trigger_id, h.reason
  FROM (SELECT d.project_id, d.trigger_id,
               -- include: lasting_refusal
          FROM qlsched.trigger_schedules AS d
          LEFT JOIN qlsched.projects AS p ON p.project_id = d.project_id
          LEFT JOIN qlsched.triggers AS t
            ON t.project_id = d.project_id AND t.trigger_id = d.trigger_id
          LEFT JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
          LEFT JOIN qlsched.execution_revisions AS e
            ON e.execution_revision_id = t.execution_revision_id
         WHERE d.active) AS h
 WHERE h.reason IS NOT NULL
 ORDER BY h.project_id, h.trigger_id
 LIMIT $1;
