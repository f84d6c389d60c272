"""`transport: http1`: a small HTTP/1.1 client for the hot path, on httptools' parser.

The gateway sends one kind of request upstream: a POST (or GET) with a body already in
bytes, answered by JSON or an SSE stream. A general client pays per request for what we
never use (cookie jars, redirects, proxies, multipart, tracing hooks, request and
response objects with dozens of fields): aiohttp's request machinery was a quarter of
the gateway's CPU per request. This client writes the request in one `write`, parses the
answer with httptools (the llhttp parser uvicorn uses, in C) inside an asyncio
`Protocol`, and keeps idle connections per origin.

What it does, and what it deliberately does not:
- keep-alive pooling per (scheme, host, port), idle connections dropped after
  `pool.keepalive_expiry` or when the server closes them; at most
  `pool.max_connections` in use per provider (a request waits `timeouts.pool` for one);
- TLS for `https` with the system's trust store, the server name checked;
- `timeouts.connect` to connect, `timeouts.read` between any two reads (like aiohttp's
  `sock_read`; checked by one sweep per client, so a stalled read fails up to an eighth
  of the timeout late): a stream that keeps sending never times out, a stalled one does;
- Content-Length, chunked and read-until-close bodies; backpressure when the consumer
  reads slower than the upstream sends;
- `iter_offered`: each read offered, in the connection's read callback, to a function
  that may take it (the stream relay writes it to the client there), so a taken read
  wakes no task; a read that is exactly one whole chunk of a chunked body is offered
  as it came, without the parser (the bytes a chunked answer to the client would be);
- no redirects, proxies, cookies or compression (we ask for none), as for the other
  clients; a request is never retried here: the dispatcher's retry policy decides.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from gateway.errors import UpstreamError, UpstreamUnavailable, UpstreamUnreachable
from gateway.providers.base import UpstreamRequest
from gateway.providers.network_errors import closed as _closed
from gateway.providers.network_errors import refused as _refused
from gateway.providers.network_errors import timed_out as _timeout
from gateway.settings.server import ProviderSettings

# pause reading from the upstream past this many unread bytes
_HIGH_WATER = 1 << 20

# what a whole chunk's size line may hold for the parser to be skipped: hex digits only
# (an extension, a space or a sign goes through the parser)
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_CR, _LF = 13, 10

Origin = tuple[str, str, int]

log = logging.getLogger("gateway.http1")


class ResponseHeaders(dict[str, str]):
    """Header names are case-insensitive; stored lower-case."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


class _ConnectionClosed(Exception):
    pass


class _Connection(asyncio.Protocol):
    """One connection, one request at a time: parser callbacks fill the current answer."""

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.origin = origin
        # the loop it was opened on: asyncio.get_running_loop() is a getpid system call
        # on Python 3.11, and a request asked for it three times here
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.waiting_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers = ResponseHeaders()
        self.headers_done = False
        self.complete = False
        self.keep_alive = True
        self.length_known = False
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        # what a read is offered to where it arrives (Http1Response.iter_offered), and
        # what a read that is one whole chunk is offered to first, as it came
        self.offer_to: Callable[[bytes], bool] | None = None
        self.offer_chunk_to: Callable[[bytes, int, int], bool] | None = None
        # the parser stands between two chunks of a chunked body, where a read that is
        # one whole chunk leaves it: such a read may skip it
        self.at_chunk_boundary = False
        # any byte of the current answer arrived (a reused connection that the server
        # closed before answering is the keep-alive race, not a failed request)
        self.received = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but speak its API
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        offer_chunk_to = self.offer_chunk_to
        if offer_chunk_to is not None and self.at_chunk_boundary:
            # one whole chunk, `1a3\r\n<payload>\r\n` (what a server pacing its events
            # writes for each): offered as it came, without the parser's callbacks, a
            # queue and a join; the parser, between chunks before it, would be between
            # chunks after it. Inline, not a method: a stream's every read comes here.
            end = data.find(b"\r\n", 0, 10)
            if (
                end > 0
                and data[-1] == _LF
                and data[-2] == _CR
                and not (size := data[:end]).lstrip(_HEX_DIGITS)
                and int(size, 16) == len(data) - end - 4 > 0
            ):
                waiter = self.waiter
                if waiter is not None and not waiter.done() and not self.chunks:
                    try:
                        taken = offer_chunk_to(data, end + 2, len(data) - 2)
                    except Exception:
                        log.exception("relaying an upstream read failed; relaying event by event")
                        self.offer_chunk_to = self.offer_to = None
                        taken = False
                    if taken:
                        # the read timeout runs between reads: this one came
                        self.waiting_since = self.loop.time()
                        return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(_ConnectionClosed("the upstream switched protocols"))
            return
        except httptools.HttpParserError as exc:
            self._fail(_ConnectionClosed(f"unparseable HTTP from the upstream ({exc})"))
            return
        if self.at_chunk_boundary and not data.endswith(b"\r\n"):
            # the read ended inside the next chunk's size line, which no callback marks
            self.at_chunk_boundary = False
        offer_to = self.offer_to
        if offer_to is not None and self.chunks:
            self._offer(offer_to)

    def _offer(self, offer_to: Callable[[bytes], bool]) -> None:
        """Offer the read's body bytes to `offer_to` here, in the read's callback, while the
        consumer waits for them: what it takes never wakes the consumer's task. What it
        leaves (or anything a wait must see: the end, an error) wakes it as ever."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            # the consumer is not parked on the next read (it was woken, or is busy with
            # one it was handed): what came after must reach it behind that, in order
            self._wake()
            return
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            taken = offer_to(data)
        except Exception:
            # a bug in the fast path: the consumer's own path gets the bytes from now on
            log.exception("relaying an upstream read failed; relaying event by event")
            self.offer_to = self.offer_chunk_to = None
            taken = False
        if not taken:
            self._wake()
            return
        chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        # the read timeout runs between reads: this one came
        self.waiting_since = self.loop.time()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.complete and not self.length_known:
            # a body delimited by the connection's end
            self.complete = True
            self._wake()
            return
        if not self.complete:
            self._fail(exc or _ConnectionClosed("the upstream closed the connection"))

    # -- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key in ("content-length", "transfer-encoding"):
            self.length_known = True
        previous = dict.get(self.headers, key)
        dict.__setitem__(self.headers, key, text if previous is None else f"{previous}, {text}")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        if not self.length_known and self.status in (204, 304):
            self.length_known = True
        # a chunked body begins between chunks (chunked as its only coding: the gateway
        # asks for no other, and anything else goes through the parser)
        self.at_chunk_boundary = (
            self.status >= 200
            and self.status not in (204, 304)
            and dict.get(self.headers, "transfer-encoding", "").strip().lower() == "chunked"
        )
        self.headers_done = True
        self._wake()

    def on_chunk_header(self) -> None:
        self.at_chunk_boundary = False

    def on_chunk_complete(self) -> None:
        self.at_chunk_boundary = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)  # httptools hands over a bytes object of its own
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        if self.offer_to is None:
            self._wake()  # (else data_received offers the read, then wakes if need be)

    def on_message_complete(self) -> None:
        self.complete = True
        self.at_chunk_boundary = False
        self._wake()

    # -- the consumer's side
    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, reads: _ReadWatch) -> None:
        """Until the parser has news (headers, a body chunk, the end), at most the client's
        read timeout (`reads` fails a wait that outlives it)."""
        loop = self.loop
        waiter = self.waiter = loop.create_future()
        reads.add(self, loop)
        try:
            await waiter
        finally:
            reads.waiting.discard(self)
            self.waiter = None

    def take(self) -> bytes:
        data = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self.error is None and not self.closed

    def start_request(self) -> None:
        self._reset()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class _ReadWatch:
    """Every connection of one client that waits for bytes, watched by one loop timer.

    A timer per wait (`call_later` and `cancel`: ~1.5 us under uvloop) cost one per stream
    chunk. Instead a wait notes when it began, and a sweep every eighth of the timeout
    fails the waits older than it: a stalled read fails between `timeout` and 1.125 x
    `timeout` after it began. The sweep re-arms itself only while someone waits."""

    __slots__ = ("_period", "_timer", "timeout", "waiting")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._period = max(timeout / 8, 0.001)
        self.waiting: set[_Connection] = set()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, connection: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        connection.waiting_since = loop.time()
        self.waiting.add(connection)
        if self._timer is None:
            self._timer = loop.call_later(self._period, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self.waiting:
            return
        now = loop.time()
        stalled = [c for c in self.waiting if now - c.waiting_since >= self.timeout]
        for connection in stalled:
            self.waiting.discard(connection)
            waiter = connection.waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(TimeoutError())
        if self.waiting:
            self._timer = loop.call_later(self._period, self._sweep, loop)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Http1Response:
    __slots__ = ("_client", "_connection", "_released", "headers", "status")

    def __init__(self, client: Http1Client, connection: _Connection) -> None:
        self._client = client
        self._connection = connection
        self._released = False
        self.status = connection.status
        self.headers: Mapping[str, str] = connection.headers

    async def read(self) -> bytes:
        parts: list[bytes] = []
        try:
            async for chunk in self.iter_bytes():
                parts.append(chunk)
        finally:
            await self.close()
        return b"".join(parts)

    def iter_bytes(self) -> AsyncIterator[bytes]:
        return self._chunks(None)

    def iter_offered(
        self,
        take: Callable[[bytes], bool],
        take_chunk: Callable[[bytes, int, int], bool] | None = None,
    ) -> AsyncIterator[bytes]:
        """The body's bytes as iter_bytes yields them, but each read offered first to
        `take`, called in the connection's read callback while this iterator waits:
        what it takes (it returns True) is not yielded, and cost no wake-up of the
        consuming task. The read timeout, backpressure and the end are as iter_bytes's.

        A read that is exactly one whole chunk of a chunked body goes to `take_chunk`
        first, as it came: `take_chunk(read, start, stop)`, its payload `read[start:stop]`
        and the read itself that payload's chunked frame. What it leaves goes to `take`."""
        return self._chunks(take, take_chunk)

    async def _chunks(
        self,
        take: Callable[[bytes], bool] | None,
        take_chunk: Callable[[bytes, int, int], bool] | None = None,
    ) -> AsyncIterator[bytes]:
        connection = self._connection
        reads = self._client.reads
        loop = connection.loop
        connection.offer_to = take
        connection.offer_chunk_to = take_chunk
        try:
            while True:
                if connection.chunks:
                    yield connection.take()
                    continue
                if connection.complete:
                    self._release()
                    return
                if connection.error is not None:
                    raise self._client.failure(connection.error)
                # connection.wait, inlined: a stream waits once per chunk, and a coroutine
                # of its own per wait was a frame made and resumed each time
                waiter = connection.waiter = loop.create_future()
                reads.add(connection, loop)
                try:
                    await waiter
                except TimeoutError:
                    connection.abort()
                    raise _timeout("waiting for data from", self._client.name) from None
                finally:
                    reads.waiting.discard(connection)
                    connection.waiter = None
        finally:
            connection.offer_to = connection.offer_chunk_to = None

    async def close(self) -> None:
        # an answer cut short closes its connection: the upstream sees the client leave
        if not self._released and not self._connection.complete:
            self._connection.abort()
        self._release()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._client.release(self._connection)


class Http1Client:
    def __init__(self, name: str, settings: ProviderSettings) -> None:
        self.name = name
        timeouts, pool = settings.timeouts, settings.pool
        self.read_timeout = timeouts.read
        self.reads = _ReadWatch(timeouts.read)
        self._connect_timeout = timeouts.connect
        self._pool_timeout = timeouts.pool
        self._keepalive_expiry = pool.keepalive_expiry
        self._max_idle = pool.max_keepalive_connections
        self._in_use = asyncio.Semaphore(pool.max_connections)
        self._idle: dict[Origin, list[_Connection]] = {}
        self._idle_count = 0
        self._targets: dict[str, tuple[Origin, bytes]] = {}
        self._tls: ssl.SSLContext | None = None
        self._all: set[_Connection] = set()

    async def send(self, request: UpstreamRequest) -> Http1Response:
        origin, head = self._target(request.url)
        connection: _Connection | None = None
        if self._in_use.locked():
            try:
                await asyncio.wait_for(self._in_use.acquire(), self._pool_timeout)
            except TimeoutError:
                raise _timeout("waiting for a free connection to", self.name) from None
        else:
            await self._in_use.acquire()
        try:
            connection = self._idle_connection(origin)
            if connection is not None and not await self._answered(connection, request, head):
                # the server closed the idle connection as we reused it (its keep-alive
                # timer won the race): nothing was answered, so send on a fresh one
                connection.abort()
                self._all.discard(connection)
                connection = None
            if connection is None:
                connection = await self._connect(origin)
                if not await self._answered(connection, request, head):
                    assert connection.error is not None
                    raise self.failure(connection.error)
        except BaseException:
            if connection is not None:
                connection.abort()
                self._all.discard(connection)
            self._in_use.release()
            raise
        return Http1Response(self, connection)

    async def _answered(
        self, connection: _Connection, request: UpstreamRequest, head: bytes
    ) -> bool:
        """Send the request and wait for the answer's headers: False when the connection
        closed before any byte of an answer arrived, an error for anything else."""
        connection.start_request()
        assert connection.transport is not None
        connection.transport.write(_request_bytes(request, head))
        while not connection.headers_done:
            if connection.error is not None:
                if connection.received or not isinstance(
                    connection.error, _ConnectionClosed | OSError
                ):
                    raise self.failure(connection.error)
                return False
            try:
                await connection.wait(self.reads)
            except TimeoutError:
                connection.abort()
                raise _timeout("waiting for data from", self.name) from None
        return True

    def release(self, connection: _Connection) -> None:
        self._in_use.release()
        if connection.reusable() and self._idle_count < self._max_idle:
            connection.idle_since = connection.loop.time()
            self._idle.setdefault(connection.origin, []).append(connection)
            self._idle_count += 1
            return
        if not connection.closed:
            connection.abort()
        self._all.discard(connection)

    def failure(self, error: BaseException) -> UpstreamError:
        if isinstance(error, UpstreamError):
            return error
        return _closed(self.name)

    async def close(self) -> None:
        self.reads.close()
        for connection in list(self._all):
            connection.abort()
        self._all.clear()
        self._idle.clear()
        self._idle_count = 0

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = idle[-1].loop.time()
        while idle:
            connection = idle.pop()  # the most recent: the least likely to be stale
            self._idle_count -= 1
            if not connection.closed and now - connection.idle_since < self._keepalive_expiry:
                return connection
            connection.abort()
            self._all.discard(connection)
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(origin, loop),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            raise _timeout("connecting to", self.name) from None
        except ssl.SSLError as exc:
            raise UpstreamUnreachable(
                f"TLS with provider '{self.name}' failed ({exc.reason or type(exc).__name__})",
                provider=self.name,
            ) from None
        except OSError:
            raise _refused(self.name) from None
        self._all.add(connection)
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def _target(self, url: str) -> tuple[Origin, bytes]:
        cached = self._targets.get(url)
        if cached is not None:
            return cached
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamUnavailable(
                f"provider '{self.name}' has a base_url this client cannot call", provider=self.name
            )
        port = parts.port or (443 if scheme == "https" else 80)
        default_port = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
        host_header = parts.hostname if default_port else f"{parts.hostname}:{port}"
        if ":" in parts.hostname and not default_port:  # IPv6 literal
            host_header = f"[{parts.hostname}]:{port}"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        head = f" {path} HTTP/1.1\r\nhost: {host_header}\r\n".encode("latin-1")
        target = ((scheme, parts.hostname, port), head)
        if len(self._targets) < 1024:  # URLs come from the config; a bound all the same
            self._targets[url] = target
        return target


def _request_bytes(request: UpstreamRequest, head: bytes) -> bytes:
    lines = [request.method.encode("ascii"), head]
    for name, value in request.headers.items():
        lower = name.lower()
        if lower in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    lines.append(b"content-length: %d\r\n\r\n" % len(request.body))
    lines.append(request.body)
    return b"".join(lines)
