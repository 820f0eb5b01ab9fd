"""DSN handling that never prints a password: check, rewrite user/password/database, redact.

Every parse goes through ``_urlsplit``: a string urllib cannot split (an unclosed IPv6
bracket) raises ``DsnError``, never a bare ``ValueError``.

A password can sit in three places, and each is found by ``has_password`` and hidden by
``redact``: the URI's userinfo (``postgresql://u:PW@host``), its query string
(``?password=PW``, also ``sslpassword=``), and a libpq key=value string
(``password=PW`` or ``password='P W'``), which ``as_uri`` turns into the same
parameters in a URI's query string before anything connects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import (
    SplitResult,
    parse_qs,
    parse_qsl,
    quote,
    unquote,
    urlencode,
    urlsplit,
    urlunsplit,
)


class DsnError(ValueError):
    """A DSN that is not a postgresql:// URI (the message never contains the DSN)."""


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
SECRET_PARAMS: Final = frozenset({"password", "sslpassword"})
"""Connection parameters whose value is a secret, in a query string or key=value form."""
ROLE_PARAMS: Final = SECRET_PARAMS | {"user", "dbname", "database"}
"""Query parameters that say who connects where: dropped when the DSN is rewritten for
another role (the superuser's ``?password=`` must never reach a role's DSN)."""
SUPERUSER_DSN_ENV: Final = "QLSCHED_SUPERUSER_DSN"
LIBPQ_DSN: Final = "postgresql://"
"""A URI with nothing in it: host, port, user, password and database all come from the
libpq variables (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGPASSWORD``, ``PGDATABASE``,
``PGSERVICE``) and the password file (``PGPASSFILE`` or ``~/.pgpass``), which asyncpg reads
itself for whatever a DSN leaves out."""
_LIBPQ_SERVER_VARS: Final = ("PGHOST", "PGSERVICE")

_IPV6_HOSTSPEC = re.compile(r"^\[[^\]]+\](?::(.*))?$")
_SCHEME = re.compile(r"^(postgres(?:ql)?)://", re.IGNORECASE)
# libpq key=value: `key = value`, the value single-quoted (backslash escapes) or bare.
_KEYWORD_VALUE = re.compile(r"""(\w+)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)""", re.DOTALL)


# One libpq keyword=value pair: the value single-quoted (``\\'`` and ``\\\\`` inside) or bare
# up to whitespace (backslash escapes too); pairs separated by whitespace.
_PAIR = re.compile(r"""\s*(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)+)\s*""", re.DOTALL)
KEYWORDS: Final = frozenset(
    {
        "host", "port", "dbname", "user", "password", "passfile", "service", "sslmode",
        "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslpassword", "sslnegotiation",
        "ssl_min_protocol_version", "ssl_max_protocol_version", "target_session_attrs",
        "krbsrvname", "gsslib", "application_name",
    }
)  # fmt: skip
"""The libpq keywords a keyword=value DSN may use: those the driver takes as URI query
parameters (``hostaddr``, ``options`` or ``connect_timeout`` it would not honour)."""


def as_uri(dsn: str) -> str:
    """``dsn`` as a postgresql:// URI: libpq's keyword=value form (``host=/run/pg
    dbname=qlsched user=qlsched_runtime``) becomes the same parameters in a query string
    (``postgresql://?host=%2Frun%2Fpg&dbname=…``); anything else is returned unchanged.

    Raises:
        DsnError: a keyword=value string that is malformed or uses a keyword the driver
            would not honour (named; the value never is).
    """
    if _SCHEME.match(dsn) is not None or "=" not in dsn or "://" in dsn:
        return dsn
    pairs: list[tuple[str, str]] = []
    at = 0
    while at < len(dsn):
        m = _PAIR.match(dsn, at)
        if m is None or m.end() == at:
            if dsn[at:].strip():
                raise DsnError(
                    "the DSN is not valid: neither a postgresql:// URI nor libpq"
                    f" keyword=value pairs (malformed at character {at + 1})"
                )
            break
        key, value = m.group(1), m.group(2)
        if key not in KEYWORDS:
            raise DsnError(
                f"the DSN is not valid: the libpq keyword {key} is not supported (host, port,"
                " dbname, user, password, sslmode, service and the other ssl* keywords are)"
            )
        if value.startswith("'"):
            value = value[1:-1]
        pairs.append((key, re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)))
        at = m.end()
    return "postgresql://?" + urlencode(pairs, quote_via=quote)


def _urlsplit(dsn: str) -> SplitResult:
    try:
        return urlsplit(dsn)
    except ValueError:
        raise DsnError("the DSN is not valid: it cannot be parsed as a URI") from None


def _split(dsn: str) -> tuple[str, str, str, str, str]:
    parts = _urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise DsnError(
            "the DSN is not valid: it must be a postgresql:// URI or libpq keyword=value"
            " pairs (host=... dbname=...)"
        )
    return parts.scheme, parts.netloc, parts.path, parts.query, parts.fragment


def _check_port(port: str) -> None:
    port = unquote(port)
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise DsnError("the DSN is not valid: a port must be a number 1..65535")


def check_dsn(dsn: str) -> None:
    """Raise DsnError unless ``dsn`` is a postgresql:// URI the driver can parse: scheme,
    host list ports (``host:port``, ``[v6]:port``, comma-separated), the query string and
    its ``port=`` values. Connecting is still the only test of whether it works."""
    if not dsn.strip():
        raise DsnError("the DSN is empty")
    _, netloc, _, query, _ = _split(dsn)
    hostspec = netloc.rpartition("@")[2]
    for host in hostspec.split(",") if hostspec else []:
        if not host or host.startswith("/"):
            continue
        if host.startswith("["):
            m = _IPV6_HOSTSPEC.match(host)
            if m is None:
                raise DsnError("the DSN is not valid: a bracketed IPv6 host is malformed")
            port = m.group(1)
        else:
            port = host.partition(":")[2]
        if port:
            _check_port(port)
    if query:
        try:
            params = parse_qs(query, strict_parsing=True)
        except ValueError:
            raise DsnError("the DSN is not valid: its query string is malformed") from None
        for value in params.get("port", [])[-1:]:
            for port in value.split(","):
                _check_port(port)
        for value in params.get("sslmode", [])[-1:]:
            if value not in SSL_MODES:
                raise DsnError(
                    f"the DSN is not valid: sslmode must be one of {', '.join(SSL_MODES)}"
                )


def _query_password(query: str) -> str | None:
    found = None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "password":
            found = value  # the last one wins, as in the driver
    return found


def _keyword_password(dsn: str) -> str | None:
    found = None
    for m in _KEYWORD_VALUE.finditer(dsn):
        if m.group(1) == "password":
            value = m.group(3)
            if value.startswith("'"):
                value = re.sub(r"\\(.)", r"\1", value[1:].removesuffix("'"))
            found = value
    return found


def password_of(dsn: str) -> str | None:
    """The password a DSN carries (userinfo, else ``?password=``; key=value), or None."""
    if _SCHEME.match(dsn) is None:
        return _keyword_password(dsn)
    parts = _urlsplit(dsn)
    if parts.password is not None:
        return unquote(parts.password)
    return _query_password(parts.query)


def has_password(dsn: str) -> bool:
    """True when the DSN itself carries a password, in any of its three forms."""
    return password_of(dsn) is not None


def user_of(dsn: str) -> str | None:
    user = _urlsplit(dsn).username
    return unquote(user) if user else None


def describe_dsn_rejection(dsn: str, exc: BaseException) -> str:
    """Why the driver refused a DSN, naming the parameter and never its value: the driver's
    message is only searched for the DSN's own parameter names, never shown."""
    try:
        query = _urlsplit(dsn).query
    except DsnError:
        query = ""
    text = str(exc)
    for name in parse_qs(query, keep_blank_values=True):
        if name in text:
            return f"the DSN is not valid: the driver refuses its {name} parameter"
    return "the DSN is not valid"


def database_of(dsn: str) -> str | None:
    """The database a DSN names (path, else ``?dbname=``), or None when left to defaults."""
    try:
        parts = _urlsplit(dsn)
    except DsnError:
        return None
    name = unquote(parts.path.lstrip("/"))
    if not name and parts.query:
        name = parse_qs(parts.query).get("dbname", [""])[-1]
    return name or None


def _without_params(query: str, names: frozenset[str]) -> str:
    kept = [p for p in query.split("&") if p and unquote(p.partition("=")[0]) not in names]
    return "&".join(kept)


def with_credentials(
    dsn: str, *, user: str, password: str | None = None, database: str | None = None
) -> str:
    """The same server (host, port, query such as ``host=/socket/dir``) as another role.

    Whatever said who connects (userinfo, ``user=``, ``password=``, ``sslpassword=``,
    ``dbname=`` in the query) is replaced, never copied: ``password`` is the only password
    the result carries.
    """
    scheme, netloc, path, query, fragment = _split(dsn)
    hostport = netloc.rpartition("@")[2]
    cred = quote(user, safe="")
    if password is not None:
        cred += ":" + quote(password, safe="")
    new_path = "/" + quote(database, safe="") if database is not None else path
    query = _without_params(query, ROLE_PARAMS)
    return urlunsplit((scheme, f"{cred}@{hostport}", new_path, query, fragment))


def with_database(dsn: str, database: str) -> str:
    """The same DSN (same role, same credentials wherever they sit) to another database."""
    scheme, netloc, _, query, fragment = _split(dsn)
    query = _without_params(query, frozenset({"dbname", "database"}))
    url = urlunsplit((scheme, netloc, "/" + quote(database, safe=""), query, fragment))
    # urllib drops the empty authority ("postgresql:/db"); keep the URI form libpq documents.
    return url if netloc else url.replace(":", "://", 1)


def _redact_query(query: str) -> str:
    out = []
    for part in query.split("&"):
        name, eq, _ = part.partition("=")
        if eq and unquote(name).lower() in SECRET_PARAMS:
            part = f"{name}=***"
        out.append(part)
    return "&".join(out)


def _redact_keywords(dsn: str) -> str:
    def hide(m: re.Match[str]) -> str:
        if m.group(1).lower() in SECRET_PARAMS:
            return f"{m.group(1)}{m.group(2)}***"
        return m.group(0)

    return _KEYWORD_VALUE.sub(hide, dsn)


def redact(dsn: str) -> str:
    """The DSN with every password replaced by ``***`` (for messages and logs).

    The userinfo ends at the last ``@`` (as urllib reads it), so a password holding an
    unencoded ``@``, ``/`` or ``?`` is hidden whole; an ``@`` later in the DSN only hides
    more. A string that is not a URI is read as libpq key=value.
    """
    m = _SCHEME.match(dsn)
    if m is None:
        if "=" in dsn and "://" not in dsn:  # another scheme's URI may hide a userinfo
            return _redact_keywords(dsn)
        return "<not a postgresql:// URI>"
    head, rest = m.group(0), dsn[m.end() :]
    userinfo, at, after = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{after}" if colon else f"{userinfo}@{after}"
    base, q, query = rest.partition("?")
    if q:
        query, hash_, fragment = query.partition("#")
        rest = base + q + _redact_query(query) + hash_ + fragment
    return head + rest


def superuser_dsn(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The superuser DSN of ``init-db``/``migrate``, kept out of ``ps`` when wanted.

    In order: the ``--dsn`` flag; ``QLSCHED_SUPERUSER_DSN``; when ``PGHOST`` or
    ``PGSERVICE`` is set, ``LIBPQ_DSN`` (everything from the libpq variables and the
    password file). None when there is none of these.
    """
    if flag is not None:
        return flag
    value = environ.get(SUPERUSER_DSN_ENV)
    if value is not None:
        return value
    return libpq_dsn(environ)


def libpq_dsn(environ: Mapping[str, str]) -> str | None:
    """``LIBPQ_DSN`` when the libpq variables name a server (``PGHOST`` or ``PGSERVICE``
    set), else None: a DSN left wholly to the environment only when it says where."""
    if any(environ.get(name) for name in _LIBPQ_SERVER_VARS):
        return LIBPQ_DSN
    return None
