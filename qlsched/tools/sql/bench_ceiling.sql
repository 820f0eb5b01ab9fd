-- The batch ceiling's part of the pgbench script (qlsched/tools/pgbench/batch.sql): it ends
-- the product's claim statement in place of the claim's own final SELECT.

-- name: bench_claim_arrays
-- The claimed rows (CTE `claimed` of the claim) as one row of arrays in the claim's order,
-- with the batch admit's inputs as core derives them for a Fire whose next cursor is 1 ms
-- after the occurrence. Empty arrays, never NULL, when nothing was claimed. Run and Attempt
-- ids are laid out as core mints them (qlsched.core.keys): four bytes naming the client
-- (its backend's pid), then a count, here one random base per batch and the row's place
-- in its last four bytes, so a batch's Runs share one or two `runs_pkey` leaf pages.
SELECT COALESCE(pg_catalog.array_agg(c.project_id), '{}') AS project_ids,
       COALESCE(pg_catalog.array_agg(c.trigger_id), '{}') AS trigger_ids,
       COALESCE(pg_catalog.array_agg(c.claim_token), '{}') AS claim_tokens,
       COALESCE(pg_catalog.array_agg(c.claim_version), '{}') AS claim_versions,
       COALESCE(pg_catalog.array_agg(c.state_version), '{}') AS state_versions,
       COALESCE(pg_catalog.array_agg(c.trigger_revision), '{}') AS trigger_revisions,
       COALESCE(pg_catalog.array_agg(c.content_digest), '{}') AS content_digests,
       COALESCE(pg_catalog.array_agg(c.task_revision), '{}') AS task_revisions,
       COALESCE(pg_catalog.array_agg(c.execution_revision_id), '{}') AS execution_revision_ids,
       COALESCE(pg_catalog.array_agg(c.next_fire_at_ms), '{}') AS fires,
       COALESCE(pg_catalog.array_agg(c.next_fire_at_ms + 1), '{}') AS nexts,
       COALESCE(pg_catalog.array_agg(0::bigint), '{}') AS coalesced,
       COALESCE(pg_catalog.array_agg(pg_catalog.encode(overlay(c.base
                     PLACING pg_catalog.int4send((2 * c.n)::integer) FROM 13 FOR 4), 'hex')::uuid),
                '{}') AS run_ids,
       COALESCE(pg_catalog.array_agg(pg_catalog.encode(overlay(c.base
                     PLACING pg_catalog.int4send((2 * c.n + 1)::integer) FROM 13 FOR 4), 'hex')::uuid),
                '{}') AS attempt_ids,
       COALESCE(pg_catalog.array_agg('ql3:cron:v1:' || c.trigger_id || ':'
                                     || c.trigger_revision::text || ':'
                                     || c.next_fire_at_ms::text), '{}') AS idempotency_keys,
       COALESCE(pg_catalog.array_agg(c.ctid::text), '{}') AS locators
  FROM (SELECT claimed.*,
               pg_catalog.row_number() OVER (
                   ORDER BY COALESCE(next_fire_at_ms, -1), project_id, trigger_id) AS n,
               -- An uncorrelated scalar subquery: drawn once for the batch.
               (SELECT overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                       PLACING pg_catalog.int4send(pg_catalog.pg_backend_pid()) FROM 1 FOR 4))
                 AS base
          FROM claimed
         ORDER BY n) AS c;
