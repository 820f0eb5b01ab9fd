-- name: request_target
-- What a new request is checked against (inside its BEGIN IMMEDIATE): the trigger's
-- revision, enabled flag, its project's state, cron, zone and DST rule (``RequestTarget``'s
-- order). ?1 project, ?2 trigger. No row: no such trigger.
SELECT t.revision, t.enabled, p.state, t.cron, t.timezone, t.dst_gap, t.dst_fold
  FROM triggers AS t
  JOIN projects AS p ON p.project_id = t.project_id
 WHERE t.project_id = ?1 AND t.trigger_id = ?2;

-- name: request_insert
-- Record one request, pending. ?1 id, ?2 project, ?3 trigger, ?4 revision, ?5 kind, ?6 note,
-- ?7 actor label, ?8 the OS user, ?9 now ms, ?10 from_ms, ?11 to_ms, ?12 total, ?13 max,
-- ?14 a backfill's first occurrence (its next_ms), ?15 'allow' to ignore the trigger's
-- overlap policy (NULL: the policy decides).
INSERT INTO control_requests (request_id, project_id, trigger_id, trigger_revision, kind, note,
                              actor, requested_by, created_at_ms, from_ms, to_ms, total,
                              max_occurrences, next_ms, updated_at_ms, overlap)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?9, ?15);

-- name: request_ready
-- The runner's look (a read, no lease): up to ?1 pending requests that can progress, each
-- with its trigger's current spec and cron cursor. A paused trigger's requests are held and
-- a backfill whose next occurrence is not before the cron cursor waits: neither takes a
-- slot. Trigger-now requests first: they never wait behind backfills.
SELECT r.request_id, r.project_id, r.trigger_id, r.trigger_revision, r.kind, r.created_at_ms,
       r.from_ms, r.to_ms, r.cursor_ms, t.revision, t.cron, t.timezone, t.dst_gap, t.dst_fold,
       t.content_digest, t.task_revision, t.execution_revision_id, s.next_fire_at_ms
  FROM control_requests AS r
  JOIN trigger_schedules AS s ON s.project_id = r.project_id AND s.trigger_id = r.trigger_id
  JOIN triggers AS t ON t.project_id = r.project_id AND t.trigger_id = r.trigger_id
 WHERE r.state = 'pending'
   AND s.paused_at_ms IS NULL
   AND (r.kind = 'trigger'
        OR (s.next_fire_at_ms IS NOT NULL
            AND coalesce(r.next_ms, r.from_ms) < s.next_fire_at_ms))
 ORDER BY r.kind <> 'trigger', r.created_at_ms, r.request_id
 LIMIT ?1;

-- name: request_fenced
-- The request as the admit's claim read it, or no row (done, refused, or its cursor moved
-- since): the compare-and-set. ?1 request, ?2 the cursor the chunk starts after.
SELECT kind, total, admitted, already_admitted, trigger_revision, overlap_skipped, overlap
  FROM control_requests
 WHERE request_id = ?1 AND state = 'pending' AND cursor_ms IS ?2;

-- name: request_schedule
-- The request's trigger now, inside the admit's transaction: its cron cursor and pause,
-- what its Runs pin, and its project's state. ?1 project, ?2 trigger.
SELECT s.next_fire_at_ms, s.paused_at_ms IS NOT NULL, t.revision, t.enabled,
       t.content_digest, t.task_revision, t.execution_revision_id, t.task_id, p.state,
       t.overlap, t.start_deadline_ms
  FROM trigger_schedules AS s
  JOIN triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
  JOIN projects AS p ON p.project_id = s.project_id
 WHERE s.project_id = ?1 AND s.trigger_id = ?2;

-- name: request_settle
-- After a chunk: its cursor, next occurrence and counts, done when nothing is left.
-- ?1 request, ?2 cursor, ?3 next_ms, ?4 inserted, ?5 already admitted, ?6 done, ?7 now ms,
-- ?8 skipped by the overlap policy.
UPDATE control_requests
   SET cursor_ms = ?2, next_ms = ?3,
       admitted = admitted + ?4, already_admitted = already_admitted + ?5,
       overlap_skipped = overlap_skipped + ?8,
       state = CASE WHEN ?6 THEN 'done' ELSE 'pending' END,
       done_at_ms = CASE WHEN ?6 THEN ?7 END,
       failures = 0, last_failure = NULL, updated_at_ms = max(updated_at_ms, ?7)
 WHERE request_id = ?1 AND state = 'pending';

-- name: request_wait
-- A backfill that must wait for cron: its next occurrence, so the look skips it until the
-- cron cursor is past. ?1 request, ?2 next_ms, ?3 now ms.
UPDATE control_requests
   SET next_ms = coalesce(?2, next_ms), updated_at_ms = max(updated_at_ms, ?3)
 WHERE request_id = ?1 AND state = 'pending';

-- name: request_refuse
-- Refused for good: it cannot succeed. ?1 request, ?2 reason, ?3 now ms.
UPDATE control_requests
   SET state = 'refused', refused_reason = ?2, done_at_ms = ?3,
       updated_at_ms = max(updated_at_ms, ?3)
 WHERE request_id = ?1 AND state = 'pending';

-- name: request_note_failure
-- An admit that could not commit: counted; at ?2 failures in a row the request is refused
-- `failed_repeatedly`, with the last failure's code ?3, instead of retried forever.
-- ?1 request, ?4 now ms.
UPDATE control_requests
   SET failures = failures + 1, last_failure = ?3,
       state = CASE WHEN failures + 1 >= ?2 THEN 'refused' ELSE state END,
       refused_reason = CASE WHEN failures + 1 >= ?2 THEN 'failed_repeatedly' END,
       done_at_ms = CASE WHEN failures + 1 >= ?2 THEN ?4 END,
       updated_at_ms = max(updated_at_ms, ?4)
 WHERE request_id = ?1 AND state = 'pending'
RETURNING state;

-- fragment: status_request_columns
-- What `edge status` shows of a request (both walks of status_requests).
r.request_id, r.project_id, r.trigger_id, r.trigger_revision, r.kind, r.note, r.actor,
r.requested_by, r.created_at_ms, r.state, r.refused_reason, r.done_at_ms, r.from_ms, r.to_ms,
r.total, r.cursor_ms, r.admitted, r.already_admitted, r.failures, r.last_failure,
r.overlap_skipped

-- name: status_requests
-- The latest requests for `edge status`: the pending ones first (oldest first), then the
-- latest ones; ?1 = how many of each. `held`: pending for a paused trigger.
SELECT * FROM (
    SELECT
           -- include: status_request_columns
      FROM control_requests AS r
     WHERE r.state = 'pending'
     ORDER BY r.created_at_ms, r.request_id
     LIMIT ?1)
UNION
SELECT * FROM (
    SELECT
           -- include: status_request_columns
      FROM control_requests AS r
     ORDER BY r.created_at_ms DESC
     LIMIT ?1)
ORDER BY created_at_ms DESC, request_id;

-- name: request_held
-- Whether trigger (?1 project, ?2 trigger) is paused: its pending requests are held.
SELECT paused_at_ms IS NOT NULL FROM trigger_schedules WHERE project_id = ?1 AND trigger_id = ?2;
