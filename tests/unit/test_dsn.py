"""DSN secrets (docs/contract.md §4, Secrets): every form of password is seen and redacted, and a
DSN rewritten for another role carries no password but its own.

Forms: the URI's userinfo, its query (``?password=``, ``sslpassword=``), and libpq
key=value strings (bare or single-quoted values). The marker must vanish from ``redact``.
"""

from __future__ import annotations

import pytest

from qlsched.postgres.dsn import (
    LIBPQ_DSN,
    has_password,
    password_of,
    redact,
    superuser_dsn,
    with_credentials,
    with_database,
)

MARK = "Mk7pw"

# id -> (DSN, the password the driver would use, or None when it sees none)
FORMS: dict[str, tuple[str, str | None]] = {
    "userinfo": (f"postgresql://su:{MARK}@127.0.0.1:5432/postgres", MARK),
    "userinfo-encoded": (f"postgresql://su:{MARK}%40%2F%3F@h/db", MARK + "@/?"),
    "userinfo-raw-at": (f"postgresql://su:{MARK}@x@h/db", MARK + "@x"),
    "query": (f"postgresql://su@h/db?sslmode=disable&password={MARK}", MARK),
    "query-first": (f"postgresql://su@h/db?password={MARK}&sslmode=disable", MARK),
    "query-encoded": (f"postgresql://su@h/db?password={MARK}%26x", MARK + "&x"),
    "query-and-fragment": (f"postgresql://h/db?password={MARK}#frag", MARK),
    "query-only": (f"postgresql://?password={MARK}", MARK),
    "sslpassword": (f"postgresql://h/db?sslpassword={MARK}", None),
    "keyword": (f"host=h user=su password={MARK} dbname=d", MARK),
    "keyword-spaces": (f"host=h password = {MARK}", MARK),
    "keyword-quoted": (f"host=h password='{MARK} \\' x' user=su", f"{MARK} ' x"),
    "keyword-quoted-unclosed": (f"host=h password='{MARK} x", f"{MARK} x"),
    "unsplittable": (f"postgresql://su:{MARK}@[::1/db", None),
    "other-scheme": (f"mysql://su:{MARK}@h/db?sslmode=x", None),
    "raw-slash-in-password": (f"postgresql://su:{MARK}/x@h/db", None),
}


@pytest.mark.parametrize("case", list(FORMS))
def test_redact_hides_every_form(case: str) -> None:
    """Rule: redact() leaves no trace of the password in any DSN form, including forms
    urllib splits wrongly (a raw '/' or '@' in the password) or cannot split at all."""
    dsn, _ = FORMS[case]
    assert MARK not in redact(dsn)


@pytest.mark.parametrize("case", list(FORMS))
def test_has_password_and_password_of_see_every_form(case: str) -> None:
    """Rule: has_password() and password_of() see the password wherever the driver would
    read it (userinfo first, else the last ?password=), and key=value strings too."""
    dsn, expected = FORMS[case]
    if case in ("unsplittable", "other-scheme"):
        return  # not a DSN at all: check_dsn refuses it before anything asks
    assert password_of(dsn) == expected
    assert has_password(dsn) == (expected is not None)


def test_redact_keeps_what_is_not_secret() -> None:
    """Rule: redaction replaces only the secret: user, host, port, database and the other
    parameters stay readable."""
    assert redact("postgresql://su:pw@h:5433/db?sslmode=disable&password=x&sslpassword=y") == (
        "postgresql://su:***@h:5433/db?sslmode=disable&password=***&sslpassword=***"
    )
    assert redact("host=h port=5 password='a b' user=su") == "host=h port=5 password=*** user=su"
    assert redact("postgresql://su@h/db") == "postgresql://su@h/db"
    assert redact("notadsn") == "<not a postgresql:// URI>"


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://su:{MARK}@h:5/postgres?sslmode=disable",
        f"postgresql://su@h:5/postgres?password={MARK}&sslmode=disable",
        f"postgresql://h:5/postgres?user=su&password={MARK}&sslpassword={MARK}&sslmode=disable",
        f"postgresql://su@h:5/postgres?dbname=other&password={MARK}&sslmode=disable",
    ],
)
def test_a_role_dsn_never_copies_the_superuser_password(dsn: str) -> None:
    """Rule: with_credentials() gives the same server (host, port, other parameters) as
    another role with only the password it is given: the superuser's password, user and
    database, wherever they sat, are not copied."""
    role = with_credentials(dsn, user="qlsched_runtime", database="qlsched")
    assert MARK not in role
    assert role == "postgresql://qlsched_runtime@h:5/qlsched?sslmode=disable"
    given = with_credentials(dsn, user="qlsched_runtime", password="p w", database="qlsched")
    assert given == "postgresql://qlsched_runtime:p%20w@h:5/qlsched?sslmode=disable"


def test_with_database_keeps_the_login() -> None:
    """Rule: with_database() changes only the database (the same login, wherever its
    password sits), and drops a query dbname that would contradict it."""
    dsn = f"postgresql://su@h/postgres?dbname=x&password={MARK}"
    assert with_database(dsn, "qlsched") == f"postgresql://su@h/qlsched?password={MARK}"
    assert with_database("postgresql://", "qlsched") == "postgresql:///qlsched"


def test_the_superuser_dsn_comes_from_the_flag_the_environment_or_libpq() -> None:
    """Rule: --dsn first, then QLSCHED_SUPERUSER_DSN, then the libpq variables when PGHOST
    or PGSERVICE names a server; nothing otherwise (so init-db can use the embedded one)."""
    env = {"QLSCHED_SUPERUSER_DSN": "postgresql://a", "PGHOST": "/tmp"}
    assert superuser_dsn("postgresql://f", env) == "postgresql://f"
    assert superuser_dsn("", env) == ""  # an empty flag is bad input, never a fallback
    assert superuser_dsn(None, env) == "postgresql://a"
    assert superuser_dsn(None, {"PGHOST": "/tmp"}) == LIBPQ_DSN
    assert superuser_dsn(None, {"PGSERVICE": "svc"}) == LIBPQ_DSN
    assert superuser_dsn(None, {"PGPASSWORD": "x", "PGHOST": ""}) is None
    assert superuser_dsn(None, {}) is None
