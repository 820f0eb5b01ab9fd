"""What every ASGI application qlsched serves on hypercorn shares (the replica's HTTP, the
worker's, the dashboard): the lifespan protocol, answered the same way by each."""

from __future__ import annotations

from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable


async def serve_lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """Acknowledge start-up and shut-down: nothing to open or close at either."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
