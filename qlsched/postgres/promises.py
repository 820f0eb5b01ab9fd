"""Readiness findings for settings that void a promise the README makes, though every
grant and every object is as the migrations define it.

A superuser can set them on the database or the runtime role, and the scheduler would run
on, breaking its word silently:

- ``synchronous_commit`` ``off`` or ``local`` for runtime sessions: an admit is acknowledged
  before a synchronous standby has it, so a promoted standby can lose it;
- ``session_replication_role`` other than ``origin``: triggers, foreign keys among them, do
  not fire (an Attempt can point at no Run);
- a runtime ``search_path`` other than the bootstrap's ``pg_catalog, pg_temp``: a name the
  product leaves to the path could resolve to someone's object;
- ``default_transaction_read_only``: every admit would fail;
- a publication streaming a qlsched table: its rows (callback tokens, payloads) leave the
  grants to whoever subscribes.

And two pieces of the bootstrap's hardening: PUBLIC may not execute the large-object
functions (``lo_from_bytea`` stores data outside every grant), and the observer role has a
``statement_timeout``.
"""

from __future__ import annotations

from typing import Final

from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query

RUNTIME_SEARCH_PATH: Final = "pg_catalog, pg_temp"
"""What the bootstrap sets for every qlsched role."""


def _on(value: str) -> bool:
    """A PostgreSQL boolean setting (``on``, ``true``, ``yes``, ``1`` and their prefixes)."""
    v = value.strip().strip("'\"").lower()
    return v in ("1", "on") or (bool(v) and ("true".startswith(v) or "yes".startswith(v)))


def _judge(name: str, value: str, source: str) -> str | None:
    """The finding for one effective runtime setting, or None when it keeps the promises."""
    v = value.strip().strip("'\"").lower()
    if name == "synchronous_commit" and v in ("off", "local", "false", "no", "0"):
        return (
            f"synchronous_commit={value} for {source}: an admit is acknowledged before a"
            " synchronous standby has it (a promoted standby can lose it); set it on"
        )
    if name == "session_replication_role" and v != "origin":
        return (
            f"session_replication_role={value} for {source}: foreign keys and triggers do"
            " not fire in runtime sessions; reset it"
        )
    if name == "search_path" and " ".join(v.replace(",", ", ").split()) != RUNTIME_SEARCH_PATH:
        return (
            f"search_path={value} for {source}: runtime sessions must use"
            f" {RUNTIME_SEARCH_PATH}; reset it (qlsched migrate restores the role's)"
        )
    if name == "default_transaction_read_only" and _on(value):
        return f"default_transaction_read_only={value} for {source}: every admit would fail"
    return None


async def promise_findings(conn: Connection) -> list[str]:
    """One finding per setting that voids a promise, naming the setting and where it is set."""
    effective: dict[str, tuple[str, str]] = {}
    for r in await conn.fetch(query("runtime_effective_settings")):
        name, _, value = str(r["setting"]).partition("=")
        effective[name] = (value, str(r["source"]))
    findings = [
        finding
        for name, (value, source) in effective.items()
        if (finding := _judge(name, value, source)) is not None
    ]
    if "search_path" not in effective:
        findings.append(
            f"qlsched_runtime has no search_path set (the bootstrap sets {RUNTIME_SEARCH_PATH}):"
            " run `qlsched migrate` as a superuser"
        )
    published: dict[str, list[str]] = {}
    for r in await conn.fetch(query("published_qlsched_tables")):
        published.setdefault(str(r["publication"]), []).append(str(r["table_name"]))
    for publication, tables in published.items():
        findings.append(
            f"publication {publication} streams qlsched.{', qlsched.'.join(tables)}: their rows"
            " leave the grants to whoever subscribes; drop them from it"
        )
    functions = [str(r[0]) for r in await conn.fetch(query("public_large_object_functions"))]
    if functions:
        findings.append(
            f"PUBLIC may execute the large-object functions ({', '.join(functions[:3])}, …):"
            " any role that connects can store data outside the grants; run `qlsched migrate`"
            " as a superuser"
        )
    if await conn.fetchval(query("observer_statement_timeout")) is None:
        findings.append(
            "qlsched_observer has no statement_timeout set: run `qlsched migrate` as a superuser"
        )
    return findings
