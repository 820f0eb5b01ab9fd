-- 0005, numbered as its PostgreSQL counterpart: the DST policy per trigger (docs/contract.md
-- §3), with the same names, defaults and allowed values. Existing triggers get the defaults,
-- the rule they were scheduled by so far. Forward-only: never edit after release.

ALTER TABLE triggers ADD COLUMN dst_gap TEXT NOT NULL DEFAULT 'shift'
    CHECK (dst_gap IN ('shift', 'skip'));
ALTER TABLE triggers ADD COLUMN dst_fold TEXT NOT NULL DEFAULT 'first'
    CHECK (dst_fold IN ('first', 'last', 'both'));
