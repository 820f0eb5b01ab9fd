-- name: migrate_lock
-- Session advisory lock serialising migration runners (and init-db) on this database.
SELECT pg_catalog.pg_advisory_lock(7262736368656475);

-- name: migrate_unlock
SELECT pg_catalog.pg_advisory_unlock(7262736368656475);

-- name: init_lock
-- Session advisory lock serialising init-db runs, taken on the maintenance database of the
-- superuser DSN (advisory locks are per database) and held from CREATE DATABASE to the last
-- password: the database, the cluster-wide roles and their passwords are made by one run at
-- a time. A key other than migrate_lock's, as the maintenance database may be the target.
SELECT pg_catalog.pg_advisory_lock(7262736368656476);

-- name: init_unlock
SELECT pg_catalog.pg_advisory_unlock(7262736368656476);

-- name: bootstrap_settings
-- Role settings the bootstrap applies to qlsched_runtime, as transaction-local GUCs:
-- $1 idle_in_transaction_session_timeout ms, $2 lock_timeout ms, $3 statement_timeout ms.
SELECT pg_catalog.set_config('qlsched.idle_in_transaction_ms', $1::text, true),
       pg_catalog.set_config('qlsched.lock_timeout_ms', $2::text, true),
       pg_catalog.set_config('qlsched.statement_timeout_ms', $3::text, true);

-- name: server_facts
-- The server version and whether the current role is a superuser.
SELECT pg_catalog.current_setting('server_version_num')::int AS version_num,
       r.rolsuper AS superuser, pg_catalog.current_database() AS database
  FROM pg_catalog.pg_roles AS r
 WHERE r.rolname = CURRENT_USER;

-- name: roles_present
-- How many of the six qlsched roles exist.
SELECT pg_catalog.count(*)::int
  FROM pg_catalog.pg_roles
 WHERE rolname IN ('qlsched_owner', 'qlsched_admin', 'qlsched_runtime',
                   'qlsched_worker_ingress', 'qlsched_observer', 'qlsched_worker');

-- name: ledger_exists
SELECT pg_catalog.to_regclass('qlsched.schema_migrations') IS NOT NULL;

-- name: migrations_applied
SELECT version, name, checksum FROM qlsched.schema_migrations ORDER BY version;

-- name: become_owner
-- Migrations run as the owner of every object.
SET LOCAL ROLE qlsched_owner;

-- name: record_migration
-- $1 version, $2 name, $3 SHA-256 hex of the file.
INSERT INTO qlsched.schema_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: database_exists
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = $1);

-- name: create_database_statement
-- The CREATE DATABASE statement for name $1, quoted by the server (it cannot be prepared).
SELECT pg_catalog.format('CREATE DATABASE %I', $1::text);

-- name: role_password_statement
-- ALTER ROLE $1 PASSWORD with a SCRAM-SHA-256 verifier $2 (never the plain password).
SELECT pg_catalog.format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text);

-- name: role_has_password
-- Whether LOGIN role $1 already has a password (superuser only: reads pg_authid).
SELECT a.rolpassword IS NOT NULL FROM pg_catalog.pg_authid AS a WHERE a.rolname = $1;

-- name: session_auth_method
-- How this session authenticated ('scram-sha-256', 'md5', 'peer', ...; NULL under trust),
-- from SYSTEM_USER: PostgreSQL 16 or newer only.
SELECT pg_catalog.split_part(SYSTEM_USER, ':', 1);
