-- The Edge profile's migration ledger, created in an empty file before its first migration.
-- application_id marks the file as qlsched's ("qlsc"), so a foreign SQLite file is told apart.
PRAGMA application_id = 1902932835;
CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL CHECK (length(checksum) = 64),
    applied_at INTEGER NOT NULL
) STRICT;
