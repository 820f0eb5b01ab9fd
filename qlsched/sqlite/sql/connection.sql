-- name: pragma_wal
-- Write-ahead log: readers (status, publish) never block the writer, and a crash loses
-- nothing committed. Returns the mode now in force.
PRAGMA journal_mode = WAL;

-- name: pragma_synchronous_full
-- Every COMMIT is on disk before it returns (the WAL is fsynced at each commit).
PRAGMA synchronous = FULL;

-- name: pragma_foreign_keys
PRAGMA foreign_keys = ON;

-- name: pragma_busy_timeout
-- A writer waits up to 5 s for another process's write lock (publish during run).
PRAGMA busy_timeout = 5000;

-- name: pragma_query_only
-- A reading command (status) cannot write by mistake.
PRAGMA query_only = ON;

-- name: begin_immediate
-- Take the write lock at the start, so a transaction never fails half-way on a lock upgrade.
BEGIN IMMEDIATE;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- name: savepoint
-- One per write in a round: a row that fails a constraint is undone alone.
SAVEPOINT edge_write;

-- name: savepoint_release
RELEASE SAVEPOINT edge_write;

-- name: savepoint_rollback
ROLLBACK TO SAVEPOINT edge_write;

-- name: begin_read
-- A deferred transaction: a consistent snapshot for a reader, no write lock.
BEGIN;
