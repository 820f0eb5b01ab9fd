-- qlsched bootstrap: roles, database hardening, the schema and the migration ledger.
--
-- Run by `qlsched init-db` and `qlsched migrate` as a superuser, connected to the target
-- database, under the migration advisory lock. Idempotent: every step checks before it acts.
-- Role settings come in as custom GUCs set with set_config() in the same transaction:
--   qlsched.idle_in_transaction_ms, qlsched.lock_timeout_ms, qlsched.statement_timeout_ms
-- Passwords are never part of this file (init-db sets SCRAM verifiers separately).

DO $bootstrap$
DECLARE
    r text;
    f pg_catalog.regprocedure;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'qlsched_owner') THEN
        CREATE ROLE qlsched_owner NOLOGIN;
    END IF;
    FOREACH r IN ARRAY ARRAY['qlsched_admin', 'qlsched_runtime', 'qlsched_worker_ingress',
                             'qlsched_observer', 'qlsched_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I LOGIN', r);
        END IF;
    END LOOP;
    -- Least privilege, re-asserted on every run (fail closed if someone widened a role).
    FOREACH r IN ARRAY ARRAY['qlsched_owner', 'qlsched_admin', 'qlsched_runtime',
                             'qlsched_worker_ingress', 'qlsched_observer', 'qlsched_worker'] LOOP
        EXECUTE pg_catalog.format(
            'ALTER ROLE %I NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS '
            'NOINHERIT', r);
        EXECUTE pg_catalog.format('ALTER ROLE %I SET search_path = pg_catalog, pg_temp', r);
    END LOOP;
    -- A stalled replica inside an admit must not hold a schedule row past its lease.
    EXECUTE pg_catalog.format('ALTER ROLE qlsched_runtime SET idle_in_transaction_session_timeout = %L',
        pg_catalog.current_setting('qlsched.idle_in_transaction_ms') || 'ms');
    EXECUTE pg_catalog.format('ALTER ROLE qlsched_runtime SET lock_timeout = %L',
        pg_catalog.current_setting('qlsched.lock_timeout_ms') || 'ms');
    EXECUTE pg_catalog.format('ALTER ROLE qlsched_runtime SET statement_timeout = %L',
        pg_catalog.current_setting('qlsched.statement_timeout_ms') || 'ms');
    -- The observer's reads (status, dashboards) are bounded; a runaway one must end too.
    ALTER ROLE qlsched_observer SET statement_timeout = '30s';

    -- Database: no PUBLIC access; CONNECT only for the LOGIN roles that need it.
    EXECUTE pg_catalog.format('REVOKE ALL ON DATABASE %I FROM PUBLIC', pg_catalog.current_database());
    EXECUTE pg_catalog.format('REVOKE ALL ON DATABASE %I FROM qlsched_worker_ingress, qlsched_owner',
        pg_catalog.current_database());
    EXECUTE pg_catalog.format('GRANT CONNECT ON DATABASE %I TO qlsched_admin, qlsched_runtime, qlsched_observer, qlsched_worker',
        pg_catalog.current_database());
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'public') THEN
        REVOKE CREATE ON SCHEMA public FROM PUBLIC;
    END IF;
    -- Large objects live outside every grant: with EXECUTE left to PUBLIC, any role that
    -- may connect could store data with lo_from_bytea. No qlsched role uses them.
    FOR f IN SELECT p.oid::pg_catalog.regprocedure FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
                AND (p.proname LIKE 'lo\_%' OR p.proname IN ('loread', 'lowrite')) LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$bootstrap$;

CREATE SCHEMA IF NOT EXISTS qlsched AUTHORIZATION qlsched_owner;
ALTER SCHEMA qlsched OWNER TO qlsched_owner;
REVOKE ALL ON SCHEMA qlsched FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE qlsched_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE qlsched_owner IN SCHEMA qlsched REVOKE ALL ON TABLES FROM PUBLIC;

CREATE TABLE IF NOT EXISTS qlsched.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    applied_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
ALTER TABLE qlsched.schema_migrations OWNER TO qlsched_owner;
