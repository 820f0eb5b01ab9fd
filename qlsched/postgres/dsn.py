"""DSN handling that never prints a password: check, rewrite user/password/database, redact.

Every parse goes through ``_urlsplit``: a string urllib cannot split (an unclosed IPv6
bracket) raises ``DsnError``, never a bare ``ValueError``.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qs, quote, unquote, urlsplit, urlunsplit


class DsnError(ValueError):
    """A DSN that is not a postgresql:// URI (the message never contains the DSN)."""


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_IPV6_HOSTSPEC = re.compile(r"^\[[^\]]+\](?::(.*))?$")


def _urlsplit(dsn: str) -> SplitResult:
    try:
        return urlsplit(dsn)
    except ValueError:
        raise DsnError("the DSN is not valid: it cannot be parsed as a URI") from None


def _split(dsn: str) -> tuple[str, str, str, str, str]:
    parts = _urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise DsnError("the DSN is not valid: it must be a postgresql:// URI")
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


def has_password(dsn: str) -> bool:
    return _urlsplit(dsn).password is not None


def user_of(dsn: str) -> str | None:
    user = _urlsplit(dsn).username
    return unquote(user) if user else None


def with_credentials(
    dsn: str, *, user: str, password: str | None = None, database: str | None = None
) -> str:
    """The same server (host, port, query such as ``host=/socket/dir``) as another role."""
    scheme, netloc, path, query, fragment = _split(dsn)
    hostport = netloc.rpartition("@")[2]
    cred = quote(user, safe="")
    if password is not None:
        cred += ":" + quote(password, safe="")
    new_path = "/" + quote(database, safe="") if database is not None else path
    return urlunsplit((scheme, f"{cred}@{hostport}", new_path, query, fragment))


def redact(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (for messages and logs)."""
    try:
        scheme, netloc, path, query, fragment = _split(dsn)
    except DsnError:
        return "<not a postgresql:// URI>"
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    netloc = f"{userinfo}@{hostport}" if at else hostport
    return urlunsplit((scheme, netloc, path, query, fragment))


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


def password_of(dsn: str) -> str | None:
    password = _urlsplit(dsn).password
    return unquote(password) if password is not None else None
