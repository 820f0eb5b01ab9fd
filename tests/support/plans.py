"""Plans as a pool runs them, and how much of a table each node handled: for the tests of
the class "a statement's work grows with its rows, never with a backlog, a history or the
square of its batch".

``analyzed`` runs a statement once under ``auto_explain`` (loaded by a superuser, who then
becomes the pool's role with the pool's settings) in a transaction rolled back; the plan
comes back to the client as a notice. ``work`` counts a node's rows over all its loops,
those it returned and those its filters removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.integration.adapter_support import Env


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def work(node: dict[str, Any]) -> float:
    """Rows the node handled over all its loops: those it returned and those it filtered
    out (EXPLAIN reports both per loop)."""
    per_loop = (
        node.get("Actual Rows", 0)
        + node.get("Rows Removed by Join Filter", 0)
        + node.get("Rows Removed by Filter", 0)
    )
    return float(node.get("Actual Loops", 0) * per_loop)


def heaviest(plan: dict[str, Any]) -> tuple[float, str]:
    """The most rows one node handled, and which node (for the assertion's message)."""
    node = max(nodes(plan), key=work)
    names = ("Node Type", "CTE Name", "Index Name", "Relation Name", "Index Cond")
    return work(node), " ".join(str(node[k]) for k in names if node.get(k))


async def analyzed(
    env: Env,
    sql: str,
    args: Sequence[Any],
    *,
    role: str,
    settings: Mapping[str, str],
    begin: str,
    marks: Sequence[str],
    analyze: str | None = None,
) -> tuple[dict[str, Any], int]:
    """The plan of ``sql`` with ``args`` as ``role``'s pool runs it (``settings``; a
    prepared statement), executed in a transaction opened by ``begin`` and rolled back; the
    plan is the notice holding one of ``marks``. ``analyze``: tables to ANALYZE first.
    Returns the plan and the rows the statement returned."""
    conn = await env.connect()  # a superuser loads auto_explain, then becomes the role
    notices: list[str] = []
    conn.conn.add_log_listener(lambda _c, message: notices.append(message.message))
    await conn.execute("LOAD 'auto_explain'")
    for name, value in {
        **settings,
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_format": "json",
        "auto_explain.log_level": "notice",
    }.items():
        await conn.fetchval("SELECT pg_catalog.set_config($1, $2, false)", name, value)
    if analyze is not None:
        await conn.execute(f"ANALYZE {analyze}")
    await conn.execute(f"SET ROLE {role}")
    await conn.execute(begin)
    notices.clear()
    rows = await conn.fetch(sql, *args)
    await conn.execute("ROLLBACK")
    [text] = [n for n in notices if any(m in n for m in marks)]
    plan: dict[str, Any] = json.loads(text[text.index("{") :])["Plan"]
    return plan, len(rows)
