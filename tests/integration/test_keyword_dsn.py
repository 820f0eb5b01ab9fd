"""libpq's keyword=value DSN (``host=... dbname=... user=...``) is accepted wherever a
postgresql:// URI is (docs/contract.md "DSNs"): the same parameters, the same server; a
malformed one or a keyword the driver would not honour is one line naming it, exit 2."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from qlsched.postgres.dsn import as_uri
from tests.integration.cluster_support import publish_triggers, trigger
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase


def _keyword_form(uri: str) -> str:
    """The URI's parameters as libpq keyword=value pairs, every value single-quoted."""
    parts = urlsplit(uri)
    pairs = dict(parse_qsl(parts.query))
    if parts.hostname:
        pairs.setdefault("host", parts.hostname)
    if parts.port:
        pairs.setdefault("port", str(parts.port))
    if parts.username:
        pairs["user"] = unquote(parts.username)
    if parts.password:
        pairs["password"] = unquote(parts.password)
    pairs["dbname"] = unquote(parts.path.lstrip("/"))
    return " ".join(
        f"{k} = '{v.replace(chr(92), chr(92) * 2).replace(chr(39), chr(92) + chr(39))}'"
        for k, v in pairs.items()
    )


async def test_status_and_check_take_a_keyword_dsn(pg_db: TestDatabase) -> None:
    """Rule: ``status`` and ``check`` given the observer's and the superuser's DSN in the
    keyword form connect as with the URI (exit 0, the same trigger listed)."""
    await publish_triggers(pg_db, [trigger("kw")])
    status = run_cli(["status", "--dsn", _keyword_form(pg_db.observer_dsn)])
    check = run_cli(["check", "--dsn", _keyword_form(pg_db.superuser_dsn)])
    assert status.returncode == 0, status.stderr
    assert "/kw" in status.stdout
    assert check.returncode == 0, check.stderr + check.stdout


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("host=/tmp hostaddr=127.0.0.1", "the libpq keyword hostaddr is not supported"),
        ("host=/tmp dbname", "malformed at character 11"),
        ("mysql://u@h/d", "must be a postgresql:// URI or libpq keyword=value"),
    ],
)
def test_a_bad_keyword_dsn_is_one_line_and_exit_2(dsn: str, says: str) -> None:
    """Rule: a keyword the driver would not honour, a malformed pair or another scheme is
    exit 2 with one line saying which, before anything connects."""
    result = run_cli(["status", "--dsn", dsn])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("qlsched status: the DSN is not valid: ")
    assert says in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_quoting_and_escapes_are_libpqs() -> None:
    """Rule: single quotes hold spaces, ``\\'`` and ``\\\\`` are unescaped, a URI is
    returned as it is."""
    uri = as_uri(r"host=/run/pg  port= 5433 password='a b\'c\\d' user=x")
    assert uri == "postgresql://?host=%2Frun%2Fpg&port=5433&password=a%20b%27c%5Cd&user=x"
    assert as_uri("postgresql://u@h/d") == "postgresql://u@h/d"
