"""Driver errors, classified once. Nothing else inspects asyncpg exceptions.

A PostgreSQL error that the server reported means the statement (and its implicit
transaction) did not commit: serialization failures and deadlocks may be retried while the
lease has room; a unique violation is named by its constraint. A lost connection, a
terminated backend or a client-side timeout during a write means the outcome is unknown:
the caller reports CommitUnknown and never re-sends the write on another connection.
No driver message is ever kept: it can echo row data.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import asyncpg


class ErrorKind(enum.Enum):
    RETRYABLE = "retryable"  # 40001 serialization_failure, 40P01 deadlock_detected
    UNIQUE = "unique"  # 23505
    CONSTRAINT = "constraint"  # other class 23, check/foreign key
    TIMEOUT = "timeout"  # 57014 statement timeout, 55P03 lock_not_available
    CONNECTION = "connection"  # lost connection or terminated backend: outcome unknown
    OTHER = "other"


RETRYABLE_STATES = frozenset({"40001", "40P01"})
# Server-side session/backend ends: the reply may have been lost after a commit.
CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03", "08000", "08003", "08006"})


class SchemaNotReady(RuntimeError):
    """Readiness failed: the lifecycle must not start. The message lists the findings;
    ``findings`` keeps them one by one (a command may show the first and point to ``check``)."""

    def __init__(self, message: str, findings: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.findings = tuple(findings)


class DatabaseUnavailable(RuntimeError):
    """The database could not be reached or refused the login (message has no DSN)."""


class StartupFailed(DatabaseUnavailable):
    """A start-up step (readiness, recovery) hit a database error: one line, no traceback.

    A subclass of ``DatabaseUnavailable`` so commands exit 1 with its message."""


class CallTimeout(TimeoutError):
    """A database call outlived its client-side budget (no reply: a frozen server or a
    connection that went silent). The connection was discarded; an admit's outcome is
    unknown."""


def sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def classify(exc: BaseException) -> ErrorKind:
    state = sqlstate(exc)
    if state is not None and isinstance(exc, asyncpg.PostgresError):
        if state in RETRYABLE_STATES:
            return ErrorKind.RETRYABLE
        if state == "23505":
            return ErrorKind.UNIQUE
        if state.startswith("23"):
            return ErrorKind.CONSTRAINT
        if state in ("57014", "55P03"):
            return ErrorKind.TIMEOUT
        if state in CONNECTION_STATES:
            return ErrorKind.CONNECTION
        return ErrorKind.OTHER
    if isinstance(
        exc,
        asyncpg.ConnectionDoesNotExistError
        | asyncpg.InterfaceError
        | ConnectionError
        | OSError
        | TimeoutError,
    ):
        return ErrorKind.CONNECTION
    return ErrorKind.OTHER


def is_permission_denied(exc: BaseException) -> bool:
    """SQLSTATE 42501: the role may not read or write what the statement names."""
    return sqlstate(exc) == "42501"


def constraint_name(exc: BaseException) -> str | None:
    name = getattr(exc, "constraint_name", None)
    return name if isinstance(name, str) else None


def is_database_error(exc: BaseException) -> bool:
    """The server answered with an error, or the connection failed or went silent."""
    return isinstance(exc, asyncpg.PostgresError) or classify(exc) is ErrorKind.CONNECTION


def describe_database_error(exc: BaseException) -> str:
    """One safe line naming the cause of a database error (SQLSTATE and class, no message)."""
    state = sqlstate(exc)
    if state == "55P03":
        return "a lock wait timed out (SQLSTATE 55P03): another session holds a lock"
    if state == "57014":
        return "a statement timed out (SQLSTATE 57014)"
    if isinstance(exc, CallTimeout):
        return "the database did not answer in time (no reply within the call budget)"
    if state is not None and state.startswith("57P"):
        return f"the server is shutting down or restarting (SQLSTATE {state})"
    if classify(exc) is ErrorKind.CONNECTION:
        return f"the connection was lost ({type(exc).__name__})"
    return f"the database refused it ({type(exc).__name__}{', SQLSTATE ' + state if state else ''})"


_SERVER_REFUSALS = {
    "42501": "permission denied: this DSN's role may not do this (see docs/contract.md §4)",
    "42P01": "a qlsched table is missing: is the database initialised (qlsched init-db)?",
    "3F000": "the qlsched schema is missing: run qlsched init-db",
    "25006": "the server is read-only (a standby?)",
}


def describe_server_error(exc: BaseException) -> str:
    """One safe line for an error the server answered a command with (by SQLSTATE only: the
    driver's message can echo row data). The commands' last resort, after their own checks."""
    state = sqlstate(exc)
    known = _SERVER_REFUSALS.get(state or "")
    if known is not None:
        return f"{known} (SQLSTATE {state})"
    return f"the server refused the command ({type(exc).__name__}, SQLSTATE {state or '?'})"


def describe_connect_error(exc: BaseException, *, database: str | None = None) -> str:
    """One safe line for a failed connect: the class of problem, never the DSN or password.
    ``database`` (the name the DSN asked for) is named when the server says it is missing."""
    state = sqlstate(exc)
    if state == "28P01":
        return "password authentication failed"
    if state == "28000":
        return "the server refused this role (authentication or pg_hba)"
    if state == "3D000":
        return (
            f"the database {database} does not exist"
            if database
            else ("the database does not exist")
        )
    if state == "42501":
        return "permission denied to connect to this database"
    if state is not None and state.startswith("57P"):
        return "the server is shutting down or starting up"
    if isinstance(exc, OSError | ConnectionError):
        return "cannot connect to the server (is it running, and is the address right?)"
    if isinstance(exc, TimeoutError):
        return "timed out connecting to the server"
    return f"cannot connect ({type(exc).__name__}{', SQLSTATE ' + state if state else ''})"
