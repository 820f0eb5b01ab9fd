"""The worker's HTTP: ``/metrics`` (Prometheus text: claims, outcomes by code, job
durations, lost leases, retries, finish problems) and ``/healthz``, on hypercorn's Trio
worker. Nothing else: a worker admits nothing, so it has no readiness to withdraw."""

from __future__ import annotations

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

from qlsched.asgi import serve_hypercorn, serve_lifespan
from qlsched.worker.metrics import WorkerMetrics

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class WorkerApp:
    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
        if scope["type"] != "http":
            return
        path = scope["path"]
        if scope["method"] != "GET" or path not in ("/metrics", "/healthz"):
            status, body, kind = 404, b"not found\n", b"text/plain"
        elif path == "/metrics":
            status, body, kind = 200, self.metrics.render(), CONTENT_TYPE
        else:
            status, body, kind = 200, b"ok\n", b"text/plain"
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", kind), (b"content-length", b"%d" % len(body))],
                "trailers": False,
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def serve_worker_http(
    metrics: WorkerMetrics,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; reports the bound address (``port=0`` works)."""
    await serve_hypercorn(WorkerApp(metrics), host, port, task_status=task_status)
