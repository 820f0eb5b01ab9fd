-- 0007: trigger-now and backfill requests (docs/contract.md §4, §10). The admin records a
-- request; a replica claims it under a lease (the four-part fence of trigger_schedules) and
-- admits it in one SERIALIZABLE transaction that also moves the request's own cursor.
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- One row per request. A request is for the trigger revision current when it was made
-- (`trigger_revision`): if the trigger is re-published before admission, it is refused.
-- `cursor_ms` is a backfill's progress: the last occurrence handled (NULL: none yet).
-- The database fills who and when (column grants leave them out of the admin's INSERT).
CREATE TABLE qlsched.control_requests (
    request_id          uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
    project_id          text NOT NULL,
    trigger_id          text NOT NULL,
    trigger_revision    bigint NOT NULL CHECK (trigger_revision >= 1),
    kind                text NOT NULL CHECK (kind IN ('trigger', 'backfill')),
    note                text CHECK (pg_catalog.length(note) BETWEEN 1 AND 1000),
    actor               text CHECK (pg_catalog.length(actor) BETWEEN 1 AND 200),
    requested_by        text NOT NULL DEFAULT SESSION_USER,
    created_at_ms       bigint NOT NULL
                            DEFAULT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint,
    state               text NOT NULL DEFAULT 'pending'
                            CHECK (state IN ('pending', 'done', 'refused')),
    refused_reason      text CHECK (refused_reason ~ '^[a-z_]{1,40}$'),
    done_at_ms          bigint,
    from_ms             bigint,
    to_ms               bigint,
    total               bigint CHECK (total BETWEEN 0 AND 1000000),
    max_occurrences     bigint CHECK (max_occurrences BETWEEN 1 AND 1000000),
    cursor_ms           bigint,
    admitted            bigint NOT NULL DEFAULT 0 CHECK (admitted >= 0),
    already_admitted    bigint NOT NULL DEFAULT 0 CHECK (already_admitted >= 0),
    claim_owner         text CHECK (pg_catalog.length(claim_owner) BETWEEN 1 AND 200),
    claim_token         uuid,
    claim_version       bigint NOT NULL DEFAULT 0 CHECK (claim_version >= 0),
    claim_expires_at_ms bigint,
    updated_at_ms       bigint NOT NULL
                            DEFAULT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint,
    FOREIGN KEY (project_id, trigger_id) REFERENCES qlsched.triggers (project_id, trigger_id),
    CHECK ((claim_token IS NULL) = (claim_owner IS NULL)
           AND (claim_token IS NULL) = (claim_expires_at_ms IS NULL)),
    CHECK ((state = 'pending') = (done_at_ms IS NULL)),
    CHECK ((state = 'refused') = (refused_reason IS NOT NULL)),
    CHECK (CASE kind
             WHEN 'trigger' THEN from_ms IS NULL AND to_ms IS NULL AND total IS NULL
                                 AND max_occurrences IS NULL AND cursor_ms IS NULL
             ELSE from_ms IS NOT NULL AND to_ms IS NOT NULL AND from_ms <= to_ms
                  AND total IS NOT NULL AND max_occurrences IS NOT NULL
                  AND total <= max_occurrences
           END),
    CHECK (admitted + already_admitted <= COALESCE(total, 1))
);

-- The requests pass's claim walks only pending requests: empty when nobody asked, so the
-- pass costs one index probe of an empty index.
CREATE INDEX control_requests_pending_idx ON qlsched.control_requests
    (created_at_ms, request_id) WHERE state = 'pending';
-- `status` shows the latest requests (read backwards, whatever the history's size).
CREATE INDEX control_requests_created_idx ON qlsched.control_requests (created_at_ms);

-- The admin records requests (who and when are the database's: not in its INSERT grant).
GRANT SELECT ON qlsched.control_requests TO qlsched_admin;
GRANT INSERT (project_id, trigger_id, trigger_revision, kind, note, actor, from_ms, to_ms,
    total, max_occurrences) ON qlsched.control_requests TO qlsched_admin;
-- The runtime claims, admits and settles them (never inserts or deletes one).
GRANT SELECT ON qlsched.control_requests TO qlsched_runtime;
GRANT UPDATE (state, refused_reason, done_at_ms, cursor_ms, admitted, already_admitted,
    claim_owner, claim_token, claim_version, claim_expires_at_ms, updated_at_ms)
    ON qlsched.control_requests TO qlsched_runtime;
-- The observer reads them for status and /v1/schedules.
GRANT SELECT ON qlsched.control_requests TO qlsched_observer;
