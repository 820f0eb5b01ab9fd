"""What HTTP may cost a replica: a cap on connections, a rate of requests, a bounded send.

The HTTP endpoints share the scheduler's Trio thread (the cluster's hypercorn, the Edge's
own responder), so a flood of clients must not take the time the rounds need. Three limits,
the same in both profiles (docs/operations.md "HTTP limits"):

- at most ``MAX_CONNECTIONS`` connections at once: the server accepts the next one only when
  one closes, so further clients wait in the kernel's accept queue and cost nothing here;
- at most ``REQUESTS_PER_S`` requests a second (bursts of ``BURST``) answered, whatever the
  endpoint: a request waits for its turn up to ``QUEUE_WAIT_S``, then gets 503 ``busy``
  (each connection handles one request at a time, so the wait also holds back its next);
- every send finishes within ``SEND_TIMEOUT_S`` or the connection is closed, and at stop
  every open connection is closed at once: a client that never reads its replies cannot
  hold a replica past its stop deadline.

Profile-neutral (Trio only), as ``sinks`` is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

MAX_CONNECTIONS: Final = 64
REQUESTS_PER_S: Final = 100.0
BURST: Final = 100
QUEUE_WAIT_S: Final = 1.0
SEND_TIMEOUT_S: Final = 5.0
METRICS_TTL_S: Final = 1.0
"""How long a rendered ``/metrics`` is served again before it is rebuilt (and read)."""


class RequestRate:
    """A token bucket on Trio's clock: ``admit()`` is True when the request may be
    answered now or within ``QUEUE_WAIT_S``, in arrival order."""

    def __init__(
        self, per_s: float = REQUESTS_PER_S, burst: int = BURST, wait_s: float = QUEUE_WAIT_S
    ) -> None:
        self._per_s = per_s
        self._burst = float(burst)
        self._wait_s = wait_s
        self._tokens = float(burst)
        self._stamp: float | None = None
        self._line = trio.Lock()
        self.refused = 0

    def _refill(self) -> None:
        now = trio.current_time()
        if self._stamp is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._per_s)
        self._stamp = now

    async def admit(self) -> bool:
        with trio.move_on_after(self._wait_s):
            async with self._line:
                self._refill()
                while self._tokens < 1:
                    await trio.sleep((1 - self._tokens) / self._per_s)
                    self._refill()
                self._tokens -= 1
                return True
        self.refused += 1
        return False


class BoundedStream(trio.abc.HalfCloseableStream):
    """A socket stream whose sends give up after ``send_timeout_s`` (closing it), even
    inside a caller's shielded scope (hypercorn shields its sends from cancellation)."""

    def __init__(self, stream: trio.SocketStream, send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        self._stream = stream
        self._send_timeout_s = send_timeout_s
        self.socket = stream.socket

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        with trio.move_on_after(self._send_timeout_s):
            await self._stream.send_all(data)
            return
        self.close_now()
        raise trio.BrokenResourceError("the client did not read within the send timeout")

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    def close_now(self) -> None:
        """Close the socket at once, without a checkpoint: a task blocked sending or
        receiving on it wakes with ``ClosedResourceError``."""
        self._stream.socket.close()


async def serve_bounded(
    handler: Callable[[BoundedStream], Awaitable[None]],
    listeners: Sequence[trio.SocketListener],
    *,
    max_connections: int = MAX_CONNECTIONS,
    send_timeout_s: float = SEND_TIMEOUT_S,
) -> None:
    """Serve ``listeners`` until cancelled, ``handler`` once per connection, at most
    ``max_connections`` at once (the next is accepted when one ends). On cancellation
    every open connection is closed at once, so no handler outlives the stop.
    Ownership: closes the listeners."""
    slots = trio.Semaphore(max_connections)
    open_streams: set[BoundedStream] = set()

    async def handle(stream: BoundedStream) -> None:
        try:
            await handler(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            open_streams.discard(stream)
            stream.close_now()
            slots.release()

    async def accept(listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                await slots.acquire()
                try:
                    raw = await listener.accept()
                except OSError:  # out of descriptors, a connection reset before accept
                    slots.release()
                    await trio.sleep(0.1)
                    continue
                except BaseException:
                    slots.release()
                    raise
                stream = BoundedStream(raw, send_timeout_s)
                open_streams.add(stream)
                nursery.start_soon(handle, stream)

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(accept, listener, nursery)
        try:
            await trio.sleep_forever()
        finally:
            for stream in list(open_streams):
                stream.close_now()
