"""The secrets sweep (docs/contract.md §4, Secrets): no password is printed, logged, served or
copied into another role's DSN, except a generated role password shown once by init-db.

A server of its own (loopback TCP, scram-sha-256) whose superuser password, the LOGIN
roles' passwords (``QLSCHED_<ROLE>_PASSWORD``) and the HTTP token all start with ``MARK``.
Every command is run as operators run it (a subprocess) with that marker in every DSN form
(userinfo, ``?password=``, a key=value string, ``QLSCHED_SUPERUSER_DSN``, ``QLSCHED_DSN``,
the libpq ``PG*`` variables, a ``.pgpass`` file), successfully and with a wrong password;
``run`` serves HTTP and writes its diagnostic sink to a file. The marker must appear in no
stdout, stderr, HTTP body or diagnostic line; the one generated password (worker_ingress
has none from the environment) appears exactly once: in init-db's line for that role.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final
from urllib.parse import quote

import asyncpg
import pytest

from qlsched.embedded import EmbeddedError, EmbeddedPostgres, start_embedded
from tests.integration.schema_support import execute, fetchval, unique_name
from tests.support.pg import in_ci

pytestmark = pytest.mark.slow

MARK: Final = "QLMARK7z"
SU_PASSWORD: Final = MARK + "-su @x/y"
"""Needs quoting in every form (a space, an '@', a '/'); no ':', which asyncpg's .pgpass
reader keeps escaped (libpq unescapes it)."""
ROLE_PASSWORDS: Final = {
    "QLSCHED_ADMIN_PASSWORD": MARK + "-admin",
    "QLSCHED_RUNTIME_PASSWORD": MARK + "-runtime",
    "QLSCHED_OBSERVER_PASSWORD": MARK + "-observer",
    "QLSCHED_WORKER_PASSWORD": MARK + "-worker",
}
HTTP_TOKEN: Final = MARK + "-token"
GENERATED: Final = "  (generated password: shown only now)"
PUBLISH_FILE: Final = b"""
[[projects]]
id = "sweep"

[[tasks]]
project = "sweep"
id = "t"
command = "echo sweep"

[[triggers]]
project = "sweep"
id = "every-second"
task = "t"
cron = "* * * * * *"
"""


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this module's own, on 127.0.0.1 with scram-sha-256; the superuser's
    password is set to the marker (over the trusted Unix socket)."""
    try:
        pg = start_embedded(bindir=os.environ.get("QLSCHED_TEST_PG_BINDIR") or None, tcp=True)
    except EmbeddedError as exc:
        if in_ci():
            pytest.fail(f"no TCP embedded PostgreSQL: {exc}")
        pytest.skip(f"no TCP embedded PostgreSQL: {exc}")
    try:
        literal = "'" + SU_PASSWORD.replace("'", "''") + "'"
        execute(pg.dsn(), f"ALTER ROLE postgres PASSWORD {literal}")
        yield pg
    finally:
        pg.cleanup()


class Sweep:
    """Runs commands with a controlled environment and keeps everything they showed."""

    def __init__(self, pg: EmbeddedPostgres, tmp: Path) -> None:
        self.pg = pg
        self.tmp = tmp
        self.database = unique_name("qlsweep")
        self.seen: list[tuple[str, str]] = []

    def uri(self, user: str, password: str | None, *, form: str, database: str = "") -> str:
        database = database or self.database
        base = f"127.0.0.1:{self.pg.port}/{quote(database, safe='')}"
        if form == "userinfo":
            return f"postgresql://{quote(user, safe='')}:{quote(password or '', safe='')}@{base}"
        if form == "query":
            return f"postgresql://{quote(user, safe='')}@{base}?password={quote(password or '')}"
        assert form == "keyword"
        quoted = (password or "").replace("\\", "\\\\").replace("'", "\\'")
        return f"host=127.0.0.1 port={self.pg.port} user={user} password='{quoted}'"

    def libpq_env(self, user: str, password: str, database: str) -> dict[str, str]:
        return {
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.pg.port),
            "PGUSER": user,
            "PGPASSWORD": password,
            "PGDATABASE": database,
        }

    def pgpass_env(self, user: str, password: str) -> dict[str, str]:
        path = self.tmp / f"pgpass-{user}"
        field = password.replace("\\", "\\\\").replace(":", "\\:")
        path.write_text(f"127.0.0.1:{self.pg.port}:*:{user}:{field}\n")
        path.chmod(0o600)
        return {"PGHOST": "127.0.0.1", "PGPORT": str(self.pg.port), "PGUSER": user} | {
            "PGPASSFILE": str(path)
        }

    def env(self, extra: Mapping[str, str]) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("QLSCHED_", "PG"))}
        # No ~/.pgpass of the machine's user: every password here is one the sweep gave.
        base["PGPASSFILE"] = str(self.tmp / "no-pgpass")
        return base | dict(extra)

    def cli(
        self, label: str, args: list[str], extra: Mapping[str, str] | None = None, *, code: int = 0
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "qlsched", *args],
            capture_output=True,
            text=True,
            env=self.env(extra or {}),
            timeout=120,
            check=False,
        )
        self.seen += [(f"{label} stdout", result.stdout), (f"{label} stderr", result.stderr)]
        assert result.returncode == code, (label, result.stderr)
        assert "Traceback" not in result.stderr, (label, result.stderr)
        return result


def _http(port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _run_replica(sweep: Sweep, runtime_dsn: str) -> None:
    """``qlsched run --http 127.0.0.1:0`` until it has admitted a Run; every endpoint is
    fetched (with and without the token), then SIGTERM; stderr and the sink are kept."""
    sink = sweep.tmp / "diagnostics.jsonl"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "qlsched", "run", "--http", "127.0.0.1:0"),
            *("--owner", "sweep", "--cadence-ms", "200", "--diagnostics", str(sink)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sweep.env({"QLSCHED_DSN": runtime_dsn, "QLSCHED_HTTP_TOKEN": HTTP_TOKEN}),
    )
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        sweep.seen.append(("run started", started))
        m = re.search(r"started http://127\.0\.0\.1:(\d+)", started)
        assert m, started
        port = int(m.group(1))
        deadline = time.monotonic() + 30
        while not fetchval(sweep.pg.dsn(sweep.database), "SELECT count(*) FROM qlsched.runs"):
            assert time.monotonic() < deadline, "no Run admitted"
            time.sleep(0.2)
        for path in ("/healthz", "/readyz", "/metrics", "/v1/schedules", "/nope"):
            for token in (None, HTTP_TOKEN, MARK + "-wrong"):
                status, body = _http(port, path, token)
                sweep.seen.append((f"GET {path} token={token is not None}", body.decode()))
                if path in ("/metrics", "/v1/schedules"):
                    assert status == (200 if token == HTTP_TOKEN else 401), (path, status)
        # Take the runtime's read of the schedules away: claims and HTTP reads fail with a
        # driver error (42501) and reach the sink as codes, SQLSTATEs and classes.
        execute(
            sweep.pg.dsn(sweep.database),
            "REVOKE SELECT ON qlsched.trigger_schedules FROM qlsched_runtime",
        )
        time.sleep(1.0)
        for path in ("/metrics", "/v1/schedules"):
            status, body = _http(port, path, HTTP_TOKEN)
            sweep.seen.append((f"GET {path} after the revoke", body.decode()))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    sweep.seen += [("run stdout", out), ("run stderr", err)]
    diagnostics = sink.read_text()
    assert "42501" in diagnostics, diagnostics
    sweep.seen.append(("diagnostic sink", diagnostics))


def test_no_password_leaks_from_any_command(server: EmbeddedPostgres, tmp_path: Path) -> None:
    """Rule: with the marker password in every DSN form and in the environment, init-db,
    migrate, check, publish, run (its HTTP endpoints and diagnostic sink) and status
    show it nowhere, whether they succeed or fail; the one generated password is shown
    exactly once, by the init-db run that generated it."""
    sweep = Sweep(server, tmp_path)
    db = sweep.database

    def superuser_ways(database: str) -> dict[str, tuple[list[str], dict[str, str]]]:
        userinfo = sweep.uri("postgres", SU_PASSWORD, form="userinfo", database=database)
        query = sweep.uri("postgres", SU_PASSWORD, form="query", database=database)
        return {
            # First: no password in any DSN, so generating one rests on what the server says.
            "pgpass": ([], sweep.pgpass_env("postgres", SU_PASSWORD) | {"PGDATABASE": database}),
            "query": (["--dsn", query], {}),
            "userinfo": (["--dsn", userinfo], {}),
            "QLSCHED_SUPERUSER_DSN": ([], {"QLSCHED_SUPERUSER_DSN": query}),
            "PG* variables": ([], sweep.libpq_env("postgres", SU_PASSWORD, database)),
        }

    for way, (args, extra) in superuser_ways("postgres").items():
        sweep.cli(f"init-db {way}", ["init-db", *args, "--database", db], ROLE_PASSWORDS | extra)
    for way, (args, extra) in superuser_ways(db).items():
        sweep.cli(f"migrate {way}", ["migrate", *args], extra)
    generated = [
        line.removesuffix(GENERATED)
        for label, text in sweep.seen
        for line in text.splitlines()
        if label.startswith("init-db") and line.endswith(GENERATED)
    ]
    assert [line.split(":", 1)[0] for line in generated] == ["qlsched_worker_ingress"]
    shown = generated[0].removeprefix("qlsched_worker_ingress: ")
    generated_password = re.sub(r"^postgresql://[^:]+:([^@]+)@.*$", r"\1", shown)
    assert len(generated_password) >= 24

    runtime_pw = ROLE_PASSWORDS["QLSCHED_RUNTIME_PASSWORD"]
    runtime = {f: sweep.uri("qlsched_runtime", runtime_pw, form=f) for f in ("userinfo", "query")}
    for form, dsn in runtime.items():
        sweep.cli(f"check --dsn {form}", ["check", "--dsn", dsn])
        sweep.cli(f"check QLSCHED_DSN {form}", ["check", "--json"], {"QLSCHED_DSN": dsn})
    sweep.cli("check PG*", ["check"], sweep.libpq_env("qlsched_runtime", runtime_pw, db))

    publish_file = tmp_path / "sweep.toml"
    publish_file.write_bytes(PUBLISH_FILE)
    admin_pw = ROLE_PASSWORDS["QLSCHED_ADMIN_PASSWORD"]
    admin = sweep.uri("qlsched_admin", admin_pw, form="query")
    sweep.cli("publish", ["publish", str(publish_file), "--dsn", admin])
    sweep.cli("publish again", ["publish", str(publish_file)], {"QLSCHED_DSN": admin})

    _run_replica(sweep, runtime["query"])

    observer_pw = ROLE_PASSWORDS["QLSCHED_OBSERVER_PASSWORD"]
    for form in ("userinfo", "query"):
        observer = sweep.uri("qlsched_observer", observer_pw, form=form)
        sweep.cli(f"status {form}", ["status", "--dsn", observer])
        sweep.cli(f"status --json {form}", ["status", "--json"], {"QLSCHED_DSN": observer})

    # Failures: a wrong password (refused by the server) in each form, the libpq key=value
    # form included, in each command; every message is about the DSN.
    wrong = MARK + "-wrong"
    for command, role, extra_args in (
        ("init-db", "postgres", ["--database", db]),
        ("migrate", "postgres", []),
        ("check", "qlsched_runtime", []),
        ("publish", "qlsched_admin", [str(publish_file)]),
        ("status", "qlsched_observer", []),
        ("run", "qlsched_runtime", []),
    ):
        for form in ("userinfo", "query", "keyword"):
            dsn = sweep.uri(role, wrong, form=form)
            sweep.cli(f"{command} wrong {form}", [command, *extra_args, "--dsn", dsn], code=1)
    sweep.cli(
        "init-db wrong PG*",
        ["init-db", "--database", db],
        sweep.libpq_env("postgres", wrong, "postgres"),
        code=1,
    )

    leaks = [label for label, text in sweep.seen if MARK in text]
    assert leaks == []
    shown_in = [label for label, text in sweep.seen if generated_password in text]
    assert len(shown_in) == 1, shown_in
    assert shown_in[0].startswith("init-db"), shown_in
    assert sum(text.count(generated_password) for _, text in sweep.seen) == 1


def test_generated_passwords_go_to_the_password_file(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: `init-db --password-file PATH` writes each generated password to PATH (mode
    0600, .pgpass lines `*:*:DATABASE:ROLE:PASSWORD`) and none to stdout, where the DSN is
    printed bare with a note naming the file; the role logs in through that file as
    PGPASSFILE; a later run that generates nothing leaves the file as it was."""
    sweep = Sweep(server, tmp_path)
    su = sweep.uri("postgres", SU_PASSWORD, form="query", database="postgres")
    sweep.cli("init-db", ["init-db", "--dsn", su, "--database", sweep.database], ROLE_PASSWORDS)
    execute(server.dsn(), "ALTER ROLE qlsched_worker_ingress PASSWORD NULL")
    target = tmp_path / "passwords"
    args = ["init-db", "--dsn", su, "--database", sweep.database, "--password-file", str(target)]
    result = sweep.cli("init-db --password-file", args, ROLE_PASSWORDS)

    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    lines = target.read_text().splitlines()
    assert len(lines) == 1, lines
    prefix = f"*:*:{sweep.database}:qlsched_worker_ingress:"
    assert lines[0].startswith(prefix)
    password = lines[0].removeprefix(prefix)
    assert password not in result.stdout + result.stderr
    bare = f"postgresql://qlsched_worker_ingress@127.0.0.1:{server.port}/{sweep.database}"
    assert f"qlsched_worker_ingress: {bare}  (generated password: in {target})" in result.stdout
    assert MARK not in result.stdout + result.stderr

    # Authentication passes with the file's password (then CONNECT is refused: by design).
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        fetchval(sweep.uri("qlsched_worker_ingress", password, form="userinfo"), "SELECT 1")

    again = sweep.cli("init-db again", args, ROLE_PASSWORDS)
    assert "generated password" not in again.stdout
    assert target.read_text().splitlines() == lines


def test_a_password_file_that_cannot_be_written_stops_before_anything(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: a --password-file path that cannot be opened (a missing directory, a
    symbolic link) is bad input: exit 2, one line, and nothing is created."""
    sweep = Sweep(server, tmp_path)
    su = sweep.uri("postgres", SU_PASSWORD, form="query", database="postgres")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    for path in (tmp_path / "missing" / "file", link):
        args = ["init-db", "--dsn", su, "--database", sweep.database, "--password-file", str(path)]
        result = sweep.cli(f"init-db {path.name}", args, code=2)
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith(f"qlsched init-db: --password-file {path}: ")
        assert not (tmp_path / "elsewhere").exists()
        exists = "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)"
        assert not fetchval(server.dsn(), exists, sweep.database)
