-- The per-occurrence ceiling of `qlsched bench`: claim ONE row with the replicas' own claim
-- statement (k = 1), then admit that one occurrence alone with their own admit statement (a
-- batch of one) in a SERIALIZABLE transaction: what a replica without batch admission would
-- send per occurrence. Run by `pgbench -M prepared` (prepared statements, as asyncpg sends).
--
-- A template: qlsched.tools.bench_data.render_pgbench replaces each `-- @NAME` line by the
-- SQL text of the named block NAME (qlsched/postgres/sql/*.sql), its `$n` parameters by the
-- pgbench expressions listed under it (`--   $n := EXPR`). pgbench reads `:name` as a
-- variable anywhere, even inside quotes and comments, so the renderer drops the blocks'
-- comments and splits any quoted ':' off its word ('a:b' -> 'a:' || 'b', folded back to one
-- constant by the planner): the statements stay the product's, token for token otherwise.
--
-- Variables: `-D owner=NAME -D lease_ms=N`; the claim's columns arrive by `\gset`.
-- The admit's decision is a Fire whose next cursor is 1 ms after the occurrence, so the row is
-- due again at once and the supply of due rows never runs out during `pgbench -T`; its
-- idempotency key is core's (ql3:cron:v1:<trigger>:<revision>:<scheduled_for>) and its Run
-- and Attempt ids MD5s of the occurrence: values, since the admit reads `$14` and `$15`
-- twice (a `gen_random_uuid()` there would be drawn anew at each read).
-- @claim
--   $1 := :owner
--   $2 := 1
--   $3 := :lease_ms
--   $4 := 0
\gset
\startpipeline
BEGIN ISOLATION LEVEL SERIALIZABLE;
-- @admit
--   $1 := :owner
--   $2 := ARRAY[:project_id::text]
--   $3 := ARRAY[:trigger_id::text]
--   $4 := ARRAY[:claim_token::uuid]
--   $5 := ARRAY[:claim_version::bigint]
--   $6 := ARRAY[:state_version::bigint]
--   $7 := ARRAY[:trigger_revision::bigint]
--   $8 := ARRAY[:content_digest::text]
--   $9 := ARRAY[:task_revision::bigint]
--   $10 := ARRAY[:execution_revision_id::uuid]
--   $11 := ARRAY[:next_fire_at_ms::bigint]
--   $12 := ARRAY[:next_fire_at_ms::bigint + 1]
--   $13 := ARRAY[0::bigint]
--   $14 := ARRAY[pg_catalog.md5('ql3' || ':' || 'cron' || ':' || 'v1' || ':' || :trigger_id::text || ':' || :trigger_revision::text || ':' || :next_fire_at_ms::text)::uuid]
--   $15 := ARRAY[pg_catalog.md5('attempt' || ':' || :trigger_id::text || ':' || :trigger_revision::text || ':' || :next_fire_at_ms::text)::uuid]
--   $16 := ARRAY['ql3' || ':' || 'cron' || ':' || 'v1' || ':' || :trigger_id::text || ':' || :trigger_revision::text || ':' || :next_fire_at_ms::text]
--   $17 := ARRAY[:locator::text]
--   $18 := false
;
COMMIT;
\endpipeline
