"""``qlsched init-db`` (docs/contract.md §7): create the database, the roles and the schema, print
one DSN per LOGIN role; idempotent; bad input fails with one line and creates nothing.

Most tests use the session's server (Unix socket, trust: no passwords). Passwords need a
server that asks for them: ``tcp_server`` is a second embedded PostgreSQL, for this module
only, listening on 127.0.0.1 with scram-sha-256, so generated passwords, passwords from the
environment and a wrong superuser password are all tested by real logins.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

import qlsched.postgres.initdb as initdb_module
import qlsched.postgres.migrate as migrate_module
from qlsched import cli
from qlsched.embedded import EmbeddedError, EmbeddedPostgres, start_embedded
from qlsched.postgres.errors import describe_connect_error
from qlsched.postgres.initdb import scram_verifier
from tests.integration.schema_support import (
    LOGIN_ROLES,
    MIGRATIONS,
    acl_snapshot,
    clean_env,
    database_exists,
    dropped_afterwards,
    execute,
    fetch,
    fetchval,
    ledger,
    readiness,
    run_cli,
    unique_name,
)
from tests.support.pg import PgCluster, in_ci

GENERATED = "  (generated password: shown only now)"


def role_lines(stdout: str) -> dict[str, str]:
    """``role: DSN[  note]`` lines of init-db's output, by role."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        role, sep, rest = line.partition(": ")
        if sep and role in LOGIN_ROLES:
            assert role not in out, f"{role} printed twice"
            out[role] = rest
    return out


def login(dsn: str) -> str:
    return str(fetchval(dsn, "SELECT current_user"))


# ---------------------------------------------------------------------------------------------
# The session server (trust)


def test_init_db_creates_database_roles_schema_and_prints_dsns(pg_cluster: PgCluster) -> None:
    """Rule: `init-db --dsn SUPERUSER --database NAME` creates NAME, migrates it, and prints
    exactly one DSN per LOGIN role (same server, the role as user, the new database), with
    which admin, runtime and observer log in and the schema is ready; worker_ingress's DSN
    is printed but its login to this database is refused."""
    with dropped_afterwards(pg_cluster) as name:
        assert not database_exists(pg_cluster, name)
        result = run_cli(["init-db", "--dsn", pg_cluster.superuser_dsn, "--database", name])
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        lines = result.stdout.splitlines()
        assert lines[: 1 + len(MIGRATIONS)] == [
            f"database {name}: created",
            *(f"migration {m}: applied" for m in MIGRATIONS),
        ]
        assert [line.split(":", 1)[0] for line in lines[1 + len(MIGRATIONS) :]] == list(LOGIN_ROLES)
        dsns = role_lines(result.stdout)
        for role in LOGIN_ROLES:
            assert dsns[role] == pg_cluster.dsn(name, role)
        for role in ("qlsched_admin", "qlsched_runtime", "qlsched_observer", "qlsched_worker"):
            assert login(dsns[role]) == role
            assert fetchval(dsns[role], "SELECT current_database()") == name
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            login(dsns["qlsched_worker_ingress"])
        assert readiness(dsns["qlsched_runtime"]).ready


def test_init_db_twice_changes_nothing(pg_cluster: PgCluster) -> None:
    """Rule: a second `init-db` on the same database succeeds, reports it as existing and
    the migration as already applied, prints the same DSNs, and leaves the ledger (applied_at
    included) and every grant as they were."""
    with dropped_afterwards(pg_cluster) as name:
        args = ["init-db", "--dsn", pg_cluster.superuser_dsn, "--database", name]
        first = run_cli(args)
        assert first.returncode == 0, first.stderr
        su = pg_cluster.dsn(name)
        recorded, grants = ledger(su), acl_snapshot(su)

        second = run_cli(args)
        assert second.returncode == 0, second.stderr
        assert second.stdout.splitlines()[: 1 + len(MIGRATIONS)] == [
            f"database {name}: exists",
            *(f"migration {m}: already applied" for m in MIGRATIONS),
        ]
        assert role_lines(second.stdout) == role_lines(first.stdout)
        assert ledger(su) == recorded
        assert acl_snapshot(su) == grants
        assert readiness(pg_cluster.dsn(name, "qlsched_runtime")).ready


def _bad_dsns(cluster: PgCluster) -> dict[str, tuple[str, str, int]]:
    """id -> (DSN, the one stderr line expected after ``qlsched init-db: ``, exit code):
    2 for a DSN that is bad input, 1 for one that is well formed but does not work."""
    not_a_uri = (
        "the DSN is not valid: neither a postgresql:// URI nor libpq keyword=value pairs"
        " (malformed at character 33)"
    )
    wrong_scheme = (
        "the DSN is not valid: it must be a postgresql:// URI or libpq keyword=value pairs"
        " (host=... dbname=...)"
    )
    missing = unique_name("qlmissing")
    return {
        "unreachable": (
            "postgresql://postgres:hunter2@127.0.0.1:1/postgres",
            "cannot connect to the server (is it running, and is the address right?)",
            1,
        ),
        "not-superuser": (
            cluster.dsn("postgres", "qlsched_admin"),
            "init-db needs a superuser DSN (this role is not a superuser)",
            1,
        ),
        "unknown-role": (
            cluster.dsn("postgres", "qlsched_nobody"),
            "the server refused this role (authentication or pg_hba)",
            1,
        ),
        "no-such-database": (
            cluster.dsn(missing),
            f"the database {missing} does not exist",
            1,
        ),
        "not-a-uri": ("host=/nonexistent user=postgres hunter2", not_a_uri, 2),
        "wrong-scheme": ("mysql://postgres:hunter2@127.0.0.1/x", wrong_scheme, 2),
        "empty": ("", "the DSN is empty", 2),
        "port-out-of-range": (
            "postgresql://postgres:hunter2@127.0.0.1:99999/postgres",
            "the DSN is not valid: a port must be a number 1..65535",
            2,
        ),
    }


BAD_DSN_IDS = [
    "unreachable",
    "not-superuser",
    "unknown-role",
    "no-such-database",
    "not-a-uri",
    "wrong-scheme",
    "empty",
    "port-out-of-range",
]


@pytest.mark.parametrize("case", BAD_DSN_IDS)
def test_bad_superuser_dsn_fails_with_one_line_and_creates_nothing(
    pg_cluster: PgCluster, case: str
) -> None:
    """Rule: a DSN that cannot connect, is not a superuser's, or is not a postgresql:// URI
    (or is empty: never "use the embedded database") makes init-db exit 1 (2 for bad input)
    with exactly one stderr line `qlsched init-db: CAUSE` (no traceback, no DSN, no password
    echoed) and creates no database."""
    dsn, cause, code = _bad_dsns(pg_cluster)[case]
    with dropped_afterwards(pg_cluster) as name:
        result = run_cli(["init-db", "--dsn", dsn, "--database", name])
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr == f"qlsched init-db: {cause}\n"
        assert "hunter2" not in result.stderr
        assert result.stdout == ""
        assert not database_exists(pg_cluster, name)


def test_an_unparsable_uri_fails_with_one_line(pg_cluster: PgCluster) -> None:
    """Rule: a URI that urllib cannot even split (an unclosed IPv6 bracket) is bad input
    like any other: one line on stderr, exit 2, no traceback, nothing created."""
    with dropped_afterwards(pg_cluster) as name:
        result = run_cli(["init-db", "--dsn", "postgresql://[::1/postgres", "--database", name])
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("qlsched init-db: ")
        assert len(result.stderr.splitlines()) == 1
        assert not database_exists(pg_cluster, name)


@pytest.mark.parametrize("name", ["", "x" * 64], ids=["empty", "64-bytes"])
def test_a_bad_database_name_fails_with_one_line(pg_cluster: PgCluster, name: str) -> None:
    """Rule: --database must be a name PostgreSQL keeps as given (1..63 bytes; a longer
    one would be truncated, and the printed DSNs would name a database that is not there):
    otherwise exit 2, one line, nothing created."""
    result = run_cli(["init-db", "--dsn", pg_cluster.superuser_dsn, "--database", name])
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"qlsched init-db: database name {name!r}: expected 1..63 bytes\n"
    assert result.stdout == ""
    assert not database_exists(pg_cluster, name[:63])


def test_a_server_older_than_15_is_refused_before_anything_is_created(
    pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: PostgreSQL 15 or newer. No older server can be had here, so the version is
    faked in-process (init-db's ``server_facts`` patched to report 14.11): init-db exits 1
    with one line and creates no database."""
    real = migrate_module.server_facts

    async def fake_facts(conn: Any) -> tuple[int, bool, str]:
        _, superuser, database = await real(conn)
        return 140011, superuser, database

    monkeypatch.setattr(initdb_module, "server_facts", fake_facts)
    name = unique_name("qlold")
    try:
        code = cli.main(["init-db", "--dsn", pg_cluster.superuser_dsn, "--database", name])
        captured = capsys.readouterr()
        assert code == 1
        assert captured.err == (
            "qlsched init-db: PostgreSQL 14 is too old: qlsched needs 15 or newer\n"
        )
        assert captured.out == ""
        assert not database_exists(pg_cluster, name)
    finally:
        execute(pg_cluster.dsn("postgres"), f'DROP DATABASE IF EXISTS "{name}"')


def test_a_wrong_password_is_described_without_the_driver_text() -> None:
    """Rule: a refused password reads "password authentication failed", never the
    driver's message (which names the user). Built from a synthetic asyncpg error so it
    holds without a password-checking server; `test_wrong_superuser_password` below shows
    the same line from a real one."""
    exc = asyncpg.InvalidPasswordError('password authentication failed for user "postgres"')
    assert describe_connect_error(exc) == "password authentication failed"


# ---------------------------------------------------------------------------------------------
# SCRAM verifiers


def test_scram_verifier_matches_rfc_7677() -> None:
    """Rule: the verifier is RFC 7677 SCRAM-SHA-256 (what PostgreSQL stores), checked
    against the RFC's own exchange: user "user", password "pencil", its salt and 4096
    iterations. The client proof and server signature in the RFC are only consistent with
    the right StoredKey and ServerKey."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    verifier = scram_verifier("pencil", salt=salt, iterations=4096)
    mechanism, rest = verifier.split("$", 1)
    header, keys = rest.split("$")
    assert mechanism == "SCRAM-SHA-256"
    assert header == "4096:W22ZaJ0SNY7soEsUEjb6gQ=="
    stored_key, server_key = (base64.b64decode(k) for k in keys.split(":"))

    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = (
        "n=user,r=rOprNGfwEbeRWgbNEkqO,"
        f"r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        f"c=biws,r={nonce}"
    ).encode()
    server_signature = hmac.new(server_key, auth_message, hashlib.sha256).digest()
    assert base64.b64encode(server_signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key


def test_scram_verifier_salts_each_call() -> None:
    """Rule: without an explicit salt every verifier gets a fresh random 16-byte salt."""
    a, b = scram_verifier("same"), scram_verifier("same")
    assert a != b
    for v in (a, b):
        assert v.startswith("SCRAM-SHA-256$4096:")
        assert len(base64.b64decode(v.split("$")[1].split(":")[1])) == 16


# ---------------------------------------------------------------------------------------------
# A password-checking server (loopback TCP, scram-sha-256)


@pytest.fixture(scope="module")
def tcp_server() -> Iterator[EmbeddedPostgres]:
    """A second embedded PostgreSQL with loopback TCP and scram-sha-256, for this module."""
    try:
        server = start_embedded(bindir=os.environ.get("QLSCHED_TEST_PG_BINDIR") or None, tcp=True)
    except EmbeddedError as exc:
        if in_ci():
            pytest.fail(f"no TCP embedded PostgreSQL: {exc}")
        pytest.skip(f"no TCP embedded PostgreSQL: {exc}")
    try:
        yield server
    finally:
        server.cleanup()


def _clear_passwords(server: EmbeddedPostgres) -> None:
    """Forget the LOGIN roles' passwords (when the roles exist), so tests do not depend on
    which of them ran first on this module's server."""
    execute(
        server.dsn(),
        "DO $$ DECLARE r text; BEGIN"
        " FOR r IN SELECT rolname FROM pg_catalog.pg_roles WHERE rolname IN"
        " ('qlsched_admin', 'qlsched_runtime', 'qlsched_worker_ingress', 'qlsched_observer',"
        " 'qlsched_worker')"
        " LOOP EXECUTE pg_catalog.format('ALTER ROLE %I PASSWORD NULL', r); END LOOP; END $$",
    )


def _verifiers(server: EmbeddedPostgres) -> dict[str, str | None]:
    rows = fetch(
        server.dsn(),
        "SELECT rolname::text, rolpassword FROM pg_catalog.pg_authid"
        " WHERE rolname = ANY($1::text[])",
        list(LOGIN_ROLES),
    )
    return {r[0]: r[1] for r in rows}


def test_generated_passwords_are_scram_and_log_in(tcp_server: EmbeddedPostgres) -> None:
    """Rule: with a superuser DSN that carries a password, init-db (which also creates the
    roles on a fresh server) generates one password per LOGIN role, prints it once in that
    role's DSN, and stores only a SCRAM-SHA-256 verifier; each printed DSN logs in over
    scram-sha-256 (worker_ingress's login passes authentication and is then refused
    CONNECT). A second run generates nothing and keeps the stored verifiers."""
    _clear_passwords(tcp_server)
    name = unique_name("qlpw")
    args = ["init-db", "--dsn", tcp_server.tcp_dsn(), "--database", name]
    first = run_cli(args)
    assert first.returncode == 0, first.stderr
    dsns = role_lines(first.stdout)
    assert sorted(dsns) == sorted(LOGIN_ROLES)
    for role, line in dsns.items():
        assert line.endswith(GENERATED), line
        assert line.startswith(f"postgresql://{role}:"), role
    stored = _verifiers(tcp_server)
    for role in LOGIN_ROLES:
        assert (stored[role] or "").startswith("SCRAM-SHA-256$4096:"), role

    printed = {role: line.removesuffix(GENERATED) for role, line in dsns.items()}
    for role in ("qlsched_admin", "qlsched_runtime", "qlsched_observer", "qlsched_worker"):
        assert login(printed[role]) == role
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        login(printed["qlsched_worker_ingress"])
    wrong = tcp_server.tcp_dsn(name, user="qlsched_runtime", password="not-the-password")
    with pytest.raises(asyncpg.InvalidPasswordError):
        login(wrong)
    assert readiness(printed["qlsched_runtime"]).ready

    second = run_cli(args)
    assert second.returncode == 0, second.stderr
    assert GENERATED not in second.stdout
    for role, line in role_lines(second.stdout).items():
        assert line == f"postgresql://{role}@127.0.0.1:{tcp_server.port}/{name}", line
    assert _verifiers(tcp_server) == stored
    assert login(printed["qlsched_runtime"]) == "qlsched_runtime"


def test_passwords_come_from_the_environment(tcp_server: EmbeddedPostgres) -> None:
    """Rule: QLSCHED_<ROLE>_PASSWORD sets that role's password (replacing one it had); it
    is not reported as generated and never echoed: the printed DSN has no password and
    names the variable, and the role logs in with the chosen password."""
    _clear_passwords(tcp_server)
    name = unique_name("qlenv")
    chosen = "from-the-environment-42"
    result = run_cli(
        ["init-db", "--dsn", tcp_server.tcp_dsn(), "--database", name],
        env={"QLSCHED_RUNTIME_PASSWORD": chosen},
    )
    assert result.returncode == 0, result.stderr
    assert chosen not in result.stdout + result.stderr
    runtime = role_lines(result.stdout)["qlsched_runtime"]
    bare = tcp_server.tcp_dsn(name, user="qlsched_runtime")
    assert runtime == f"{bare}  (password from QLSCHED_RUNTIME_PASSWORD)"
    assert login(tcp_server.tcp_dsn(name, "qlsched_runtime", chosen)) == "qlsched_runtime"
    assert role_lines(result.stdout)["qlsched_observer"].endswith(GENERATED)


def test_wrong_superuser_password(tcp_server: EmbeddedPostgres) -> None:
    """Rule: a superuser DSN with a wrong password fails with one line, "password
    authentication failed", exit 1, without echoing the password, and creates nothing."""
    name = unique_name("qlwrong")
    dsn = tcp_server.tcp_dsn(password="hunter2-is-wrong")
    result = run_cli(["init-db", "--dsn", dsn, "--database", name])
    assert result.returncode == 1
    assert result.stderr == "qlsched init-db: password authentication failed\n"
    assert result.stdout == ""
    assert not fetchval(
        tcp_server.dsn(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name
    )


# ---------------------------------------------------------------------------------------------
# Concurrent runs


def _run_concurrently(argvs: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start every ``python -m qlsched ARGV`` at once; wait for all of them."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "qlsched", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        for argv in argvs
    ]
    results = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return results


def _assert_one_created(results: list[subprocess.CompletedProcess[str]], name: str) -> None:
    for r in results:
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""
    firsts = sorted(r.stdout.splitlines()[0] for r in results)
    assert firsts == [f"database {name}: created"] + [f"database {name}: exists"] * (
        len(results) - 1
    )
    for m in MIGRATIONS:
        said = sorted(line for r in results for line in r.stdout.splitlines() if m in line)
        assert said == [f"migration {m}: already applied"] * (len(results) - 1) + [
            f"migration {m}: applied"
        ]
    assert len({tuple(sorted(role_lines(r.stdout).items())) for r in results}) == 1


def test_concurrent_init_db_on_one_new_database(pg_cluster: PgCluster) -> None:
    """Rule: init-db runs started at the same moment for one database that does not exist
    yet all succeed: exactly one reports it created and the migration applied, the others
    find both done; they print the same DSNs; the ledger holds one row; the schema is
    ready (no 42P04 duplicate_database or 23505 on pg_database surfaces)."""
    with dropped_afterwards(pg_cluster) as name:
        args = ["init-db", "--dsn", pg_cluster.superuser_dsn, "--database", name]
        results = _run_concurrently([args] * 4)
        _assert_one_created(results, name)
        assert [row[1] for row in ledger(pg_cluster.dsn(name))] == MIGRATIONS
        assert readiness(pg_cluster.dsn(name, "qlsched_runtime")).ready


def test_concurrent_init_db_on_a_fresh_server_creates_roles_once() -> None:
    """Rule: on a server where no qlsched role exists yet, concurrent init-db runs (two for
    one database, one for another) all succeed: the roles are created once (no 23505 on
    pg_authid or 42710 duplicate_object surfaces) and both databases are ready."""
    try:
        server = start_embedded(bindir=os.environ.get("QLSCHED_TEST_PG_BINDIR") or None)
    except EmbeddedError as exc:
        if in_ci():
            pytest.fail(f"no embedded PostgreSQL: {exc}")
        pytest.skip(f"no embedded PostgreSQL: {exc}")
    try:
        assert (
            fetchval(server.dsn(), "SELECT count(*) FROM pg_roles WHERE rolname ~ '^qlsched_'") == 0
        )
        a, b = unique_name("qlca"), unique_name("qlcb")
        base = ["init-db", "--dsn", server.dsn(), "--database"]
        results = _run_concurrently([[*base, a], [*base, a], [*base, b]])
        _assert_one_created(results[:2], a)
        assert results[2].returncode == 0, results[2].stderr
        assert results[2].stdout.splitlines()[: 1 + len(MIGRATIONS)] == [
            f"database {b}: created",
            *(f"migration {m}: applied" for m in MIGRATIONS),
        ]
        for name in (a, b):
            assert readiness(server.dsn(name, "qlsched_runtime")).ready
    finally:
        server.cleanup()
