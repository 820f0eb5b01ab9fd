-- name: application_id
-- The file's owner mark; qlsched Edge files carry 'qlsc' (set by schema/sqlite/ledger.sql).
PRAGMA application_id;

-- name: table_names
SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%';

-- name: migrations_applied
SELECT version, name, checksum FROM schema_migrations ORDER BY version;

-- name: migration_record
-- ?1 version, ?2 file name, ?3 SHA-256 hex, ?4 now ms.
INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?1, ?2, ?3, ?4);

-- name: catalog
-- Every schema object as its DDL text, to compare the file with what the migrations define.
SELECT type, name, sql FROM sqlite_schema
 WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name;

-- name: write_probe
-- Rolled back at once: fails with SQLITE_READONLY on a read-only file before a scheduler
-- starts, instead of at its first round.
UPDATE capability SET version = version WHERE name = 'qlsched.edge_scheduler';

-- name: foreign_keys_get
PRAGMA foreign_keys;

-- name: foreign_keys_off
-- Outside a transaction only (SQLite ignores it inside one).
PRAGMA foreign_keys = OFF;

-- name: foreign_keys_on
PRAGMA foreign_keys = ON;

-- name: foreign_key_check
-- Rows whose parent row is missing: (table, rowid, parent table, constraint index).
PRAGMA foreign_key_check;
