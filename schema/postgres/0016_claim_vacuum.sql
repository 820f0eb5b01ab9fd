-- 0016: vacuum the schedule rows sooner (docs/performance.md, Claim).
-- Runs as qlsched_owner. Forward-only: never edit after release (the runner checks SHA-256).

-- Every claim and every admit moves a row out of or into the claim's partial index, so the
-- index's due end collects an entry per claim and per admit that only VACUUM removes, and
-- each claim walks them (cost that grows with history: 6,000 index pages a claim, 30 ms,
-- before the first autovacuum of a million-row burst at PostgreSQL's defaults, which wait
-- for a fifth of the table to be dead). At 1 % the table is vacuumed again as soon as the
-- last vacuum ended. Storage parameters are a DBA's tuning: readiness does not check them.
ALTER TABLE qlsched.trigger_schedules SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000
);
