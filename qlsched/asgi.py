"""What every ASGI application qlsched serves on hypercorn shares (the replica's HTTP, the
worker's, the dashboard): the lifespan protocol, answered the same way by each; the
HTTP-only application (the replica's, the dashboard); and, for the two served by
hypercorn's own Trio worker (the worker's, the dashboard), how that server is set up."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import partial

import hypercorn.config
import hypercorn.trio
import trio
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope


async def serve_lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """Acknowledge start-up and shut-down: nothing to open or close at either."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class HttpApp(ABC):
    """An ASGI application that speaks HTTP only: the lifespan answered, each request to
    ``http``, a websocket refused before its handshake (policy violation)."""

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
        elif scope["type"] == "http":
            await self.http(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": None})

    @abstractmethod
    async def http(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Answer one HTTP request."""


async def serve_hypercorn(
    app: ASGIFramework,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on hypercorn's Trio worker until cancelled, with no access or error log
    of hypercorn's own; reports hypercorn's bound address (``http://HOST:PORT``) once bound,
    so ``port=0`` works."""
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(
                hypercorn.trio.serve, app, config, shutdown_trigger=trio.sleep_forever, mode="asgi"
            )
        )
        task_status.started(binds[0])
