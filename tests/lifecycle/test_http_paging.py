"""``/v1/schedules`` pages by key (issue #20 item 7), and the backlog gauge says it is bounded.

A full page carries ``next_cursor`` (its last row's ``PROJECT/TRIGGER``); ``?cursor=`` that
value gives the rows after it; the last page's ``next_cursor`` is null. A malformed cursor
is bad input (400), never a page from the start.
"""

from __future__ import annotations

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from qlsched.cluster.http import SchedulesResponse
from qlsched.cluster.metrics import Metrics
from qlsched.core.store import DUE_BACKLOG_LIMIT
from tests.lifecycle.test_http import app_of, replica, request, serving


async def test_pages_follow_next_cursor_to_the_end() -> None:
    """Rule: following ``next_cursor`` from the first page visits every row once, in key
    order, pages of ``limit`` rows; a cursor after the last row gives an empty page with a
    null cursor; a cursor that is not ``PROJECT/TRIGGER`` of valid ids is a 400."""
    r = replica()
    keys = [(p, f"t{i:02d}") for p in ("a", "b") for i in range(7)]
    for project, trigger in reversed(keys):
        r.store.add_trigger(project, trigger, "* * * * *")

    async with serving(app_of(r)) as port:
        seen: list[tuple[str, str]] = []
        pages = 0
        path = "/v1/schedules?limit=5"
        while True:
            response = await request(port, path)
            assert response.status == 200
            page = msgspec.json.decode(response.body, type=SchedulesResponse)
            pages += 1
            seen += [(v.project_id, v.trigger_id) for v in page.schedules]
            if page.next_cursor is None:
                break
            assert page.next_cursor == "/".join(seen[-1])
            path = f"/v1/schedules?limit=5&cursor={page.next_cursor}"
        assert seen == keys
        assert pages == 3

        end = await request(port, "/v1/schedules?cursor=b/t06")
        assert msgspec.json.decode(end.body, type=SchedulesResponse) == SchedulesResponse([])
        for bad in ("b", "b/", "/t1", "B/t1", "a/b/c", "a%2Ft1%2Fx"):
            assert (await request(port, f"/v1/schedules?cursor={bad}")).status == 400, bad


def test_the_backlog_gauge_names_its_limit_and_stays_under_it() -> None:
    """Rule: ``/metrics`` exports ``qlsched_due_backlog_limit`` (where the bounded count
    stops) and the ``qlsched_due_backlog`` help says the count is bounded; a reader that
    counts further is clamped to the limit."""
    metrics = Metrics()
    metrics.set_due_backlog(DUE_BACKLOG_LIMIT * 5)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    assert "bounded" in families["qlsched_due_backlog"].documentation
    [limit] = families["qlsched_due_backlog_limit"].samples
    [backlog] = families["qlsched_due_backlog"].samples
    assert limit.value == backlog.value == DUE_BACKLOG_LIMIT
