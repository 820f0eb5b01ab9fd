"""A loopback TCP proxy in front of a PostgreSQL Unix socket that can see, hold or lose admits.

Role: fault injection for tests/ha and tests/faults. Clients connect to 127.0.0.1 on a port
picked by the kernel; each client connection gets its own upstream connection to the
server's Unix socket, where the embedded server's ``trust`` applies, so no password is
needed on either side (the server sees a Unix-socket client).

The proxy reads the wire protocol just enough to recognise the admit statement: a client
Parse whose SQL contains ``INSERT INTO qlsched.runs`` names a prepared statement, and a
Bind of that statement is one admit (one implicit transaction); an admit of no rows (a
replica preparing the statement at start-up) is forwarded as any statement, uncounted.
Before forwarding an admit's Bind the proxy awaits ``on_admit(ctx)``, which may

* return at once (the admit goes on as usual),
* wait (the Bind and everything after it are held: to the server the client is silent, as
  a process stopped before it wrote would be),
* set ``ctx.abort``: the Bind is never forwarded and both sockets are closed (the admit
  never reached the server, as with a process killed before it wrote),
* set ``ctx.lose_reply``: the Bind is forwarded, and the server's whole reply up to and
  including ReadyForQuery (``Z``, sent only after the implicit transaction committed) is
  dropped and the client's socket is reset (SO_LINGER 0): the client sees ECONNRESET after
  its COMMIT landed, docs/contract.md §5's "COMMIT outcome unknown".

Every Bind (of any statement) also awaits ``on_statement(sql)`` first, with the SQL of the
statement it executes: a hook that waits holds that statement (and the connection) the
same way, to stop a replica at one chosen await point of its round.

``blackhole()`` makes the proxy a network that went silent: from then on nothing is
forwarded either way and new connections are accepted but never answered; no socket is
closed, so neither side sees an RST or an EOF (a cable pulled, a firewall dropping
packets). ``heal()`` forwards what was held and carries on.

Everything else passes through byte for byte. Ownership: ``serve`` runs until cancelled
and closes every socket it opened; it reports its port through ``task_status``.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

ADMIT_MARKER = b"INSERT INTO qlsched.runs"
KEY_PREFIX = "ql3:cron:v1:"
TEXT_OID = 25
# Untyped first messages: their 4-byte code follows the length.
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


@dataclasses.dataclass
class AdmitContext:
    """One admit Bind seen by the proxy, before it is forwarded."""

    number: int
    """1 for the first admit through this proxy, 2 for the next, ..."""
    connection: int
    """The proxy's number of the client connection that sent it."""
    params: list[bytes | None]
    formats: list[int]
    lose_reply: bool = False
    """Set by ``on_admit``: forward, then drop the reply after the commit and reset."""
    abort: bool = False
    """Set by ``on_admit``: never forward this admit; close both sides instead."""
    forwarded: trio.Event = dataclasses.field(default_factory=trio.Event)
    """Set once the Bind has been handed to the server's socket."""

    def text_arrays(self) -> list[list[str]]:
        """Every parameter that is a text array, decoded (binary or text format)."""
        out: list[list[str]] = []
        for i, raw in enumerate(self.params):
            if raw is None:
                continue
            fmt = self.formats[i] if len(self.formats) > 1 else (self.formats or [0])[0]
            values = _binary_text_array(raw) if fmt == 1 else _text_array(raw)
            if values is not None:
                out.append(values)
        return out

    def rowless(self) -> bool:
        """An admit of no rows (a replica preparing the statement at start-up, which
        writes nothing): every text array it carries is empty."""
        arrays = self.text_arrays()
        return bool(arrays) and not any(arrays)

    def idempotency_keys(self) -> list[str]:
        """The admit's idempotency keys (the text-array parameter of ``ql3:cron:v1:`` keys)."""
        for values in self.text_arrays():
            if values and all(v.startswith(KEY_PREFIX) for v in values):
                return values
        return []


@dataclasses.dataclass
class LostReply:
    """An admit whose committed reply the proxy dropped."""

    number: int
    keys: list[str]
    dropped_bytes: int
    error_reply: bool
    """The dropped reply held an ErrorResponse: the admit did not commit."""


AdmitHook = Callable[[AdmitContext], Awaitable[None]]
StatementHook = Callable[[bytes], Awaitable[None]]


async def _no_hook(ctx: AdmitContext) -> None:
    return None


async def _no_statement_hook(sql: bytes) -> None:
    return None


def _binary_text_array(raw: bytes) -> list[str] | None:
    if len(raw) < 12:
        return None
    ndim, _flags, oid = struct.unpack_from("!iiI", raw, 0)
    if oid != TEXT_OID or ndim > 1:
        return None
    if ndim == 0:
        return []
    count, _lower = struct.unpack_from("!ii", raw, 12)
    pos, values = 20, []
    for _ in range(count):
        (n,) = struct.unpack_from("!i", raw, pos)
        pos += 4
        if n < 0:
            return None
        values.append(raw[pos : pos + n].decode())
        pos += n
    return values


def _text_array(raw: bytes) -> list[str] | None:
    text = raw.decode(errors="replace")
    if not (text.startswith("{") and text.endswith("}")):
        return None
    inner = text[1:-1]
    return [v.strip('"') for v in inner.split(",")] if inner else []


def _rowless(formats: list[int], params: list[bytes | None]) -> bool:
    """Hooks and counts skip an admit of no rows: not one the tests gate, lose or kill."""
    return AdmitContext(number=0, connection=0, params=params, formats=formats).rowless()


def _cstring(payload: bytes, pos: int) -> tuple[bytes, int]:
    end = payload.index(b"\x00", pos)
    return payload[pos:end], end + 1


def _parse_bind(payload: bytes) -> tuple[bytes, list[int], list[bytes | None]]:
    _portal, pos = _cstring(payload, 0)
    statement, pos = _cstring(payload, pos)
    (nfmt,) = struct.unpack_from("!h", payload, pos)
    pos += 2
    formats = list(struct.unpack_from(f"!{nfmt}h", payload, pos))
    pos += 2 * nfmt
    (nparams,) = struct.unpack_from("!h", payload, pos)
    pos += 2
    params: list[bytes | None] = []
    for _ in range(nparams):
        (n,) = struct.unpack_from("!i", payload, pos)
        pos += 4
        if n < 0:
            params.append(None)
        else:
            params.append(payload[pos : pos + n])
            pos += n
    return statement, formats, params


class _Connection:
    """One client connection and its upstream: two pumps sharing the admit state."""

    def __init__(
        self, proxy: PgProxy, number: int, client: trio.SocketStream, upstream: trio.SocketStream
    ) -> None:
        self.proxy = proxy
        self.number = number
        self.client = client
        self.upstream = upstream
        self.admit_statements: set[bytes] = set()
        self.statements: dict[bytes, bytes] = {}
        """Prepared statement name -> its SQL, from the client's Parse messages."""
        self.lose: AdmitContext | None = None
        self.expect_raw_reply = False
        self.first_message = trio.Event()
        """Set once the client's first message is classified: until then the server-side
        pump cannot know whether a one-byte SSL/GSS answer comes first."""
        self.scope = trio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._client_to_server)
                nursery.start_soon(self._server_to_client)

    async def _read_exactly(self, stream: trio.SocketStream, buf: bytearray, n: int) -> bool:
        while len(buf) < n:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return False
            buf += chunk
        return True

    async def _client_to_server(self) -> None:
        buf = bytearray()
        try:
            # Startup: untyped messages (length, then a code) until the StartupMessage.
            while True:
                if not await self._read_exactly(self.client, buf, 4):
                    return
                (length,) = struct.unpack_from("!i", buf, 0)
                if not await self._read_exactly(self.client, buf, length):
                    return
                message, buf = bytes(buf[:length]), buf[length:]
                (code,) = struct.unpack_from("!i", message, 4)
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    self.expect_raw_reply = True
                self.first_message.set()
                await self.proxy.passage()
                await self.upstream.send_all(message)
                if code == CANCEL_REQUEST:
                    return
                if code not in (SSL_REQUEST, GSSENC_REQUEST):
                    break
            while True:
                if not await self._read_exactly(self.client, buf, 5):
                    return
                kind = buf[0:1]
                (length,) = struct.unpack_from("!i", buf, 1)
                if not await self._read_exactly(self.client, buf, 1 + length):
                    return
                message, buf = bytes(buf[: 1 + length]), buf[1 + length :]
                payload = message[5:]
                if kind == b"P":
                    name, pos = _cstring(payload, 0)
                    sql, _ = _cstring(payload, pos)
                    self.statements[name] = sql
                    if self.proxy.marker in sql:
                        self.admit_statements.add(name)
                    else:
                        self.admit_statements.discard(name)
                elif kind == b"B":
                    statement, formats, params = _parse_bind(payload)
                    await self.proxy.on_statement(self.statements.get(statement, b""))
                    if statement in self.admit_statements and not _rowless(formats, params):
                        ctx = await self._admit(formats, params)
                        if ctx.abort:
                            return
                        await self.proxy.passage()
                        await self.upstream.send_all(message)
                        ctx.forwarded.set()
                        continue
                await self.proxy.passage()
                await self.upstream.send_all(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.scope.cancel()

    async def _admit(self, formats: list[int], params: list[bytes | None]) -> AdmitContext:
        proxy = self.proxy
        proxy.admits += 1
        ctx = AdmitContext(
            number=proxy.admits, connection=self.number, params=params, formats=formats
        )
        await proxy.on_admit(ctx)
        if ctx.lose_reply:
            self.lose = ctx
        return ctx

    async def _server_to_client(self) -> None:
        buf = bytearray()
        dropped = 0
        error = False
        try:
            await self.first_message.wait()
            if self.expect_raw_reply:
                # The one-byte answer to SSLRequest/GSSENCRequest ('N': go on in plain text).
                if not await self._read_exactly(self.upstream, buf, 1):
                    return
                answer, buf = bytes(buf[:1]), buf[1:]
                await self.proxy.passage()
                await self.client.send_all(answer)
                if answer != b"N":
                    await self._pass_through(buf)
                    return
            while True:
                if not await self._read_exactly(self.upstream, buf, 5):
                    return
                kind = buf[0:1]
                (length,) = struct.unpack_from("!i", buf, 1)
                if not await self._read_exactly(self.upstream, buf, 1 + length):
                    return
                message, buf = bytes(buf[: 1 + length]), buf[1 + length :]
                if self.lose is None:
                    await self.proxy.passage()
                    await self.client.send_all(message)
                    continue
                dropped += len(message)
                error = error or kind == b"E"
                if kind == b"Z":
                    # ReadyForQuery: the implicit transaction is over, committed unless an
                    # ErrorResponse came first (recorded: the gate then sees no landing).
                    await self._reset_client(self.lose, dropped, error)
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.scope.cancel()

    async def _pass_through(self, buf: bytearray) -> None:
        if buf:
            await self.proxy.passage()
            await self.client.send_all(bytes(buf))
        while chunk := await self.upstream.receive_some(65536):
            await self.proxy.passage()
            await self.client.send_all(chunk)

    async def _reset_client(self, ctx: AdmitContext, dropped: int, error: bool) -> None:
        self.proxy.lost.append(
            LostReply(
                number=ctx.number,
                keys=ctx.idempotency_keys(),
                dropped_bytes=dropped,
                error_reply=error,
            )
        )
        sock = self.client.socket
        # SO_LINGER 0: close() sends RST, so the client reads ECONNRESET, not a clean EOF.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self.client.aclose()
        await self.upstream.aclose()


class PgProxy:
    """Listens on 127.0.0.1:0 and forwards to ``upstream`` (a server's Unix socket path)."""

    def __init__(
        self,
        upstream: str | Path,
        *,
        on_admit: AdmitHook | None = None,
        on_statement: StatementHook | None = None,
        marker: bytes = ADMIT_MARKER,
    ) -> None:
        self.upstream = str(upstream)
        self.marker = marker
        """What the SQL of a statement the hook sees contains (default: the admit's)."""
        self.on_admit: AdmitHook = on_admit or _no_hook
        self.on_statement: StatementHook = on_statement or _no_statement_hook
        self.port = 0
        self.connections = 0
        self.admits = 0
        """Admit Binds seen (held or not)."""
        self.lost: list[LostReply] = []
        self._healed: trio.Event | None = None

    def blackhole(self) -> None:
        """Stop forwarding both ways, closing nothing (see the module docstring)."""
        if self._healed is None:
            self._healed = trio.Event()

    def heal(self) -> None:
        """Forward again, held bytes first."""
        healed, self._healed = self._healed, None
        if healed is not None:
            healed.set()

    @property
    def blackholed(self) -> bool:
        return self._healed is not None

    async def passage(self) -> None:
        """Return at once, or when the blackhole heals (never, if it does not)."""
        while self._healed is not None:
            await self._healed.wait()

    def dsn(self, database: str, user: str = "qlsched_runtime", *, ssl: bool = False) -> str:
        """A DSN through the proxy; ``ssl=True`` leaves asyncpg's default ``sslmode=prefer``
        (an SSLRequest first, answered "N": the path of a real server over TCP)."""
        query = "" if ssl else "?sslmode=disable"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}{query}"

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        async with client:
            await self.passage()
            try:
                upstream = await trio.open_unix_socket(self.upstream)
            except OSError:
                return
            async with upstream:
                await _Connection(self, number, client, upstream).run()


def unix_socket_path(socket_dir: str | Path, port: int) -> str:
    """The path of a server's Unix socket (``.s.PGSQL.<port>`` in its socket directory)."""
    return str(Path(socket_dir) / f".s.PGSQL.{port}")
