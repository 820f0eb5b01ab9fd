"""DSN handling that never prints a password: rewrite user/password/database, redact."""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit, urlunsplit


class DsnError(ValueError):
    """A DSN that is not a postgresql:// URI (the message never contains the DSN)."""


def _split(dsn: str) -> tuple[str, str, str, str, str]:
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise DsnError("the DSN must be a postgresql:// URI")
    return parts.scheme, parts.netloc, parts.path, parts.query, parts.fragment


def has_password(dsn: str) -> bool:
    return urlsplit(dsn).password is not None


def user_of(dsn: str) -> str | None:
    user = urlsplit(dsn).username
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


def password_of(dsn: str) -> str | None:
    password = urlsplit(dsn).password
    return unquote(password) if password is not None else None
