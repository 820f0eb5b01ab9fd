-- 0008: jitter per trigger (docs/contract.md §10). An occurrence scheduled for S becomes due
-- at S + h, h = qlsched.jitter_offset_ms(project, trigger, revision, S, jitter_ms): the same
-- value on every replica (qlsched.core.jitter computes it too; a test holds them equal).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- Part of the trigger's content digest when not 0 (publish computes it), so a changed jitter
-- is a new revision and an upgraded trigger keeps its revision. Publish checks the bound
-- below the trigger's shortest period; the CHECK holds the absolute one.
ALTER TABLE qlsched.triggers
    ADD COLUMN jitter_ms bigint NOT NULL DEFAULT 0
        CONSTRAINT triggers_jitter_ms_check CHECK (jitter_ms BETWEEN 0 AND 3600000);

-- h: the first 56 bits of SHA-256 over 'ql3:jitter:v1:<project>:<trigger>:<revision>:<S>'
-- (ids are ASCII without backslashes, so decode(..., 'escape') is the text's own bytes),
-- modulo jitter_ms > 0. Immutable, so a generated column may use it; not strict, so the
-- planner may inline it.
CREATE FUNCTION qlsched.jitter_offset_ms(project_id text, trigger_id text,
                                         trigger_revision bigint, scheduled_for_ms bigint,
                                         jitter_ms bigint)
    RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ('x' || pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(pg_catalog.decode(
            'ql3:jitter:v1:' || project_id || ':' || trigger_id || ':'
            || trigger_revision::text || ':' || scheduled_for_ms::text, 'escape')), 1, 7),
        'hex'))::bit(56)::bigint % jitter_ms;
REVOKE ALL ON FUNCTION qlsched.jitter_offset_ms(text, text, bigint, bigint, bigint) FROM PUBLIC;

-- The revision's jitter, pinned on its schedule row by publish with the revision (the
-- runtime may not change it: no column grant), and the due time every cursor write keeps
-- right by itself: admit, initialize, skip, resume and publish all write next_fire_at_ms
-- and this follows. Without jitter it is the cursor, and the hash is not computed.
ALTER TABLE qlsched.trigger_schedules
    ADD COLUMN jitter_ms bigint NOT NULL DEFAULT 0
        CONSTRAINT trigger_schedules_jitter_ms_check CHECK (jitter_ms BETWEEN 0 AND 3600000),
    ADD COLUMN due_at_ms bigint GENERATED ALWAYS AS (
        CASE WHEN jitter_ms = 0 THEN next_fire_at_ms
             ELSE next_fire_at_ms + qlsched.jitter_offset_ms(project_id, trigger_id,
                                         trigger_revision, next_fire_at_ms, jitter_ms)
        END) STORED;

-- The claim walks due times, not cursors: same name, same shape, same partial predicate.
DROP INDEX qlsched.trigger_schedules_claim_idx;
CREATE INDEX trigger_schedules_claim_idx ON qlsched.trigger_schedules
    ((COALESCE(due_at_ms, -1)), project_id, trigger_id)
    WHERE active AND claim_token IS NULL;

-- Whoever writes a cursor computes the due time: the admin (publish, pause, resume) and
-- the runtime (admit, initialize, skip).
GRANT EXECUTE ON FUNCTION qlsched.jitter_offset_ms(text, text, bigint, bigint, bigint)
    TO qlsched_admin, qlsched_runtime;
