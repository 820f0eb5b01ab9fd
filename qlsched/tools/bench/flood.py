"""An HTTP flood for the bench: many clients requesting one replica's ``/healthz`` without
pause, so the steady phase can be measured again under it (issue #31: 200 clients halved a
replica's admits before the HTTP limits of ``qlsched.http_limits``).

Each client opens a connection, sends one request (``Connection: close``), reads the answer
and starts again; answers are counted by status, failures to connect as errors.
"""

from __future__ import annotations

import msgspec
import trio

CLIENTS = 200


class FloodCount(msgspec.Struct, kw_only=True):
    clients: int
    answered: int = 0
    """200 answers."""
    busy: int = 0
    """503 answers (over the request rate)."""
    errors: int = 0
    """Connections refused, reset or cut."""


def _port(http: str) -> tuple[str, int]:
    host, _, port = http.partition("://")[2].rpartition(":")
    return host.strip("[]"), int(port)


async def flood(http: str, count: FloodCount, *, path: str = "/healthz") -> None:
    """Request ``path`` of ``http`` (``http://HOST:PORT``) from ``count.clients`` clients
    until cancelled, counting into ``count``."""
    host, port = _port(http)
    request = f"GET {path} HTTP/1.1\r\nHost: replica\r\nConnection: close\r\n\r\n".encode()

    async def client() -> None:
        while True:
            try:
                stream = await trio.open_tcp_stream(host, port)
                async with stream:
                    await stream.send_all(request)
                    data = b""
                    while chunk := await stream.receive_some(65536):
                        data += chunk
            except OSError:
                count.errors += 1
                await trio.sleep(0.01)
                continue
            status = data[9:12]
            if status == b"200":
                count.answered += 1
            elif status == b"503":
                count.busy += 1
            else:
                count.errors += 1

    async with trio.open_nursery() as nursery:
        for _ in range(count.clients):
            nursery.start_soon(client)
