"""What every ASGI application qlsched serves on hypercorn shares (the replica's HTTP, the
worker's, the dashboard): the lifespan protocol, answered the same way by each, and the
HTTP-only application (the replica's, the dashboard)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope


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
