-- 0005: the DST policy per trigger (docs/contract.md §3). `dst_gap`: a fixed-hour wall time
-- in a spring-forward gap fires at the gap's end ('shift') or not that day ('skip');
-- `dst_fold`: one in a repeated hour fires at its first instant, its last, or both. The
-- defaults are the rule every trigger had before, so existing rows keep their behaviour.
-- Both are part of the trigger's content digest (computed by publish), so a changed policy
-- is a new revision. The existing table grants cover the new columns.
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

ALTER TABLE qlsched.triggers
    ADD COLUMN dst_gap text NOT NULL DEFAULT 'shift'
        CONSTRAINT triggers_dst_gap_check CHECK (dst_gap IN ('shift', 'skip')),
    ADD COLUMN dst_fold text NOT NULL DEFAULT 'first'
        CONSTRAINT triggers_dst_fold_check CHECK (dst_fold IN ('first', 'last', 'both'));
