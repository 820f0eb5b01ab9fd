-- The batch ceiling of `qlsched bench`: what the replicas' rounds send, with nothing of
-- Python between the statements: claim up to :k rows with their own claim statement, then
-- admit all of them in ONE batch admit (their own admit statement) in a SERIALIZABLE
-- transaction. Run by `pgbench -M prepared`, as the runtime role, one client per replica.
--
-- The claim's final SELECT is replaced by block bench_claim_arrays (qlsched/tools/sql/):
-- pgbench's \gset takes one row, so the claimed rows come back as one row of arrays, in the
-- claim's order, with the admit's other inputs derived as core derives them (the Fire's
-- next cursor 1 ms after the occurrence, so the supply of due rows never runs out; the
-- idempotency key; fresh Run and Attempt ids). Everything else is the product's, token for
-- token (see pair.sql for how the template is rendered).
--
-- Variables: `-D owner=NAME -D lease_ms=N -D k=N`; the arrays arrive by `\gset`.
-- @claim ending bench_claim_arrays
--   $1 := :owner
--   $2 := :k
--   $3 := :lease_ms
--   $4 := 0
\gset
\startpipeline
BEGIN ISOLATION LEVEL SERIALIZABLE;
-- @admit
--   $1 := :owner
--   $2 := :project_ids::text[]
--   $3 := :trigger_ids::text[]
--   $4 := :claim_tokens::uuid[]
--   $5 := :claim_versions::bigint[]
--   $6 := :state_versions::bigint[]
--   $7 := :trigger_revisions::bigint[]
--   $8 := :content_digests::text[]
--   $9 := :task_revisions::bigint[]
--   $10 := :execution_revision_ids::uuid[]
--   $11 := :fires::bigint[]
--   $12 := :nexts::bigint[]
--   $13 := :coalesced::bigint[]
--   $14 := :run_ids::uuid[]
--   $15 := :attempt_ids::uuid[]
--   $16 := :idempotency_keys::text[]
--   $17 := :locators::text[]
--   $18 := false
;
COMMIT;
\endpipeline
