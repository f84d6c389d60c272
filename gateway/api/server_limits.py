"""The HTTP server's own limits, and its own answers in the OpenAI error shape.

uvicorn (httptools) keeps a connection as long as the client likes until its first
request, lets headers arrive one byte a second, waits for a half-sent body forever, has no
cap on header size or count, and answers a malformed request with a `text/plain`
"Invalid HTTP request received.". `GatewayHttpProtocol` is its httptools protocol with
those gaps closed, every limit a setting (`server.connections`, see
`gateway/settings/server.py`):

- idle: a connection with no request in progress is closed after
  `keep_alive_timeout_seconds` (uvicorn's keep-alive timer covers the time between
  requests; this one the time before the first);
- headers: from a request's first byte its headers must be complete within
  `header_timeout_seconds`, else a 408 and the connection is closed;
- body: a pause between two body reads longer than `body_idle_timeout_seconds`, or a
  whole body not in within `body_timeout_seconds` of its headers, gets a 408 (neither
  counted while the gateway itself has paused reading);
- size: a request line and headers over `max_header_bytes`, or more than `max_headers`
  headers, get a 431;
- count: past `max_connections` open connections (held under the open-files limit, two
  descriptors per connection) a new connection gets a 503 and is closed, so the process
  never runs out of descriptors; a log line (at most one per 10 s per reason) says so;
- every close is counted in `gateway_connections_closed_total{reason}`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from asyncio import TimerHandle
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.api.asgi_connection import BODY_WRITER
from gateway.api.hot_exchange import DirectApp, DirectBody, HotCycle
from gateway.errors import ErrorBody, ErrorEnvelope
from gateway.settings.server import ConnectionLimits

log = logging.getLogger("gateway.server")

# descriptors kept out of the connection budget: listening sockets, logs, Redis, the
# metrics files, the upstream pools' spare connections
RESERVED_FDS = 128
LOG_EVERY_SECONDS = 10.0


def open_files_limit() -> int | None:
    """The soft RLIMIT_NOFILE, raised to the hard limit first (as nginx's
    worker_rlimit_nofile does): the default soft limit (1024) is what a busy gateway hits."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (OSError, ValueError):
        pass
    else:
        return None if soft == resource.RLIM_INFINITY else soft
    try:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return None


class ClosedConnections(Protocol):
    """Where closes are counted (GatewayMetrics, `gateway_connections_closed_total`)."""

    def connection_closed(self, reason: str) -> None: ...


class ConnectionGuard:
    """One per worker process: the limits in force (read from the settings on every new
    connection, so a reload applies to new connections), the metric, and the log."""

    def __init__(
        self,
        limits: Callable[[], ConnectionLimits],
        metrics: ClosedConnections | None,
        open_files: int | None = None,
    ) -> None:
        self._limits = limits
        self._metrics = metrics
        files = open_files if open_files is not None else open_files_limit()
        self.fd_cap = max(1, (files - RESERVED_FDS) // 2) if files is not None else None
        self._logged: dict[str, tuple[float, int]] = {}
        current = limits()
        configured = current.max_connections
        # the default (10,000) is a ceiling, not a wish: capping it under a smaller
        # open-files limit is expected; a cap the operator wrote and cannot have is worth
        # a warning
        chosen = "max_connections" in current.model_fields_set
        if self.fd_cap is not None and configured > self.fd_cap:
            (log.warning if chosen else log.debug)(
                "server.connections.max_connections is %d but the open-files limit (%s) "
                "allows %d client connections (two descriptors each, %d reserved): "
                "capping at %d; raise `ulimit -n` to allow more",
                configured,
                files,
                self.fd_cap,
                RESERVED_FDS,
                self.fd_cap,
            )

    @property
    def limits(self) -> ConnectionLimits:
        return self._limits()

    def max_connections(self, limits: ConnectionLimits) -> int:
        cap = limits.max_connections
        return cap if self.fd_cap is None else min(cap, self.fd_cap)

    def closed(self, reason: str, detail: str) -> None:
        if self._metrics is not None:
            self._metrics.connection_closed(reason)
        now = time.monotonic()
        last, suppressed = self._logged.get(reason, (-LOG_EVERY_SECONDS, 0))
        if now - last < LOG_EVERY_SECONDS:
            self._logged[reason] = (last, suppressed + 1)
            return
        self._logged[reason] = (now, 0)
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        log.warning("closed a client connection: %s%s", detail, more)


def find_guard(app: Any) -> ConnectionGuard | None:
    """The guard of the gateway app under uvicorn's middleware wrappers, if any."""
    holder = _unwrapped(
        app, lambda a: isinstance(getattr(a, "connection_guard", None), ConnectionGuard)
    )
    guard: ConnectionGuard | None = holder.connection_guard if holder is not None else None
    return guard


def find_direct_app(app: Any) -> DirectApp | None:
    """The gateway app, whose hot endpoints the protocol serves itself (hot_exchange.py),
    under uvicorn's middleware wrappers, if it is one."""
    found: DirectApp | None = _unwrapped(
        app, lambda a: callable(getattr(a, "serves_directly", None))
    )
    return found


def _unwrapped(app: Any, wanted: Callable[[Any], bool]) -> Any:
    """The first of `app` and the apps it wraps (each wrapper holds the next as `.app`)
    that is `wanted`, or None."""
    for _ in range(8):
        if wanted(app):
            return app
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


class _HeaderLimit(Exception):
    """Raised from a parser callback to stop parsing a request whose headers are too big."""


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the gateway's connection limits (see the module
    docstring) and OpenAI-shaped answers for what the server refuses itself."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        guard = find_guard(self.app)
        self._guard = guard or ConnectionGuard(ConnectionLimits, None)
        # the gateway app, whose hot endpoints the protocol serves itself (hot_exchange.py)
        self._direct = find_direct_app(self.app) if self.limit_concurrency is None else None
        self._limits = self._guard.limits
        self._timer: TimerHandle | None = None
        self._waiting_for: str | None = None  # which timer is armed: idle, headers, body
        # where the parser is in the current request: headers, body, or None (between)
        self._phase: str | None = None
        self._last_body_at = 0.0
        self._body_started_at = 0.0
        self._header_bytes = 0
        self._header_count = 0
        self._refusal: tuple[int, str, str, str] | None = None
        # the keep-alive period between requests (see on_response_complete)
        self._keep_alive_timer: TimerHandle | None = None
        self._idle_since: float | None = None

    # -- connection ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(self._coalescing)  # type: ignore[arg-type]
        cap = self._guard.max_connections(self._limits)
        if len(self.connections) > cap:
            self._answer_and_close(
                503,
                "service_unavailable",
                "too_many_connections",
                f"The gateway is serving its maximum of {cap} connections; retry shortly.",
                reason="too_many_connections",
            )
            return
        self._arm("idle", self._limits.keep_alive_timeout_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._idle_since = None
        if self._waiting_for == "idle":
            self._disarm()
        super().data_received(data)
        # the timers follow where the parser stopped, set once per read rather than in
        # each callback: a request that arrives whole in one read arms none
        phase = self._phase
        if phase == self._waiting_for or self.transport.is_closing():
            return
        if phase == "headers":
            self._arm("headers", self._limits.header_timeout_seconds)
        elif phase == "body":
            limits = self._limits
            self._arm("body", min(limits.body_idle_timeout_seconds, limits.body_timeout_seconds))
        elif self._waiting_for != "idle":
            self._disarm()

    # -- parser callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._coalescing.request_begins()
        self._header_bytes = 0
        self._header_count = 0
        self._phase = "headers"

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self._limits.max_headers:
            self._refuse_headers(f"more than {self._limits.max_headers} headers")
        self._count_header_bytes(len(name) + len(value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        direct = self._direct
        url = self.url
        # a plain path (no query, no escapes) to a hot endpoint is served without ASGI
        if (
            direct is not None
            and url.isascii()
            and direct.serves_directly(path := url.decode("ascii"))
            and not self.parser.should_upgrade()
        ):
            self._start_hot(direct, path)
        else:
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:
                # (a cycle of its own: not an upgrade, which keeps the one before)
                extensions: dict[str, object] = self.scope.setdefault("extensions", {})  # type: ignore[assignment]
                extensions[BODY_WRITER] = DirectBody(cycle)
        self._last_body_at = self._body_started_at = self.loop.time()
        self._phase = "body"

    def _start_hot(self, direct: DirectApp, path: str) -> None:
        """uvicorn's `on_headers_complete` for a hot endpoint's request: a `HotCycle`,
        started now or queued behind the request before it on the connection."""
        parser = self.parser
        http_version = parser.get_http_version()
        method = parser.get_method().decode("ascii")
        scope = self.scope
        scope["method"] = method
        scope["path"] = path
        scope["raw_path"] = self.url
        scope["query_string"] = b""
        if http_version != "1.1":
            scope["http_version"] = http_version
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        existing = self.cycle
        cycle = HotCycle(self, direct, method, path, keep_alive)
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, self.app)
        else:
            # pipelined: it starts when the answer before it is complete
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))

    def on_body(self, body: bytes) -> None:
        # the armed timer checks this when it fires: no timer churn per chunk
        self._last_body_at = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._phase = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        # the answer is whole: send it now, not at the end of the turn, which the app's
        # after-work (settlement, the access log, metrics, the ledger) would otherwise delay
        self._coalescing.flush()
        # uvicorn's, but for its keep-alive timer: uvicorn starts one after every answer
        # and cancels it at the next request's first read; here one timer runs per
        # keep-alive period and, when it fires, closes the connection only if nothing
        # came since the last answer, else waits out the rest of the period
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(
                self.timeout_keep_alive, self._keep_alive_expired
            )

    def _keep_alive_expired(self) -> None:
        self._keep_alive_timer = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return  # a request is being served: its answer starts the next period
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._keep_alive_timer = self.loop.call_later(left, self._keep_alive_expired)
        else:
            self.transport.close()

    # -- answers the server gives itself ------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """httptools refused the request (a malformed request line, Content-Length,
        Transfer-Encoding or header), or a header limit did: answer in the OpenAI shape."""
        if self._refusal is not None:
            status, kind, code, message = self._refusal
            self._answer_and_close(status, kind, code, message, reason="headers_too_large")
            return
        self._answer_and_close(
            400,
            "invalid_request_error",
            "invalid_http_request",
            "The HTTP request is malformed (its request line, Content-Length, "
            "Transfer-Encoding or a header could not be parsed).",
            reason="bad_request",
        )

    def _answer_and_close(
        self, status: int, kind: str, code: str, message: str, *, reason: str
    ) -> None:
        cycle = self.cycle
        started = False
        if cycle is not None and not cycle.response_complete:
            # the app is still at work on this request: nothing of its answer may follow
            started = cycle.response_started
            cycle.disconnected = True
            cycle.message_event.set()
        if not self.transport.is_closing() and not started:
            body = _error_json(message, kind, code)
            head = [STATUS_LINE[status]]
            head += [name + b": " + value + b"\r\n" for name, value in self._default_headers()]
            head += [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
        self.transport.close()
        self._guard.closed(reason, f"{reason} ({status}) for {self._peer()}")

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "an unknown client"

    def _default_headers(self) -> list[tuple[bytes, bytes]]:
        headers: list[tuple[bytes, bytes]] = self.server_state.default_headers
        return headers

    # -- limits -------------------------------------------------------------------

    def _count_header_bytes(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self._limits.max_header_bytes:
            self._refuse_headers(f"over {self._limits.max_header_bytes} bytes")

    def _refuse_headers(self, what: str) -> None:
        self._refusal = (
            431,
            "invalid_request_error",
            "request_header_fields_too_large",
            f"The request line and headers are too large ({what}); the gateway's limits are "
            f"{self._limits.max_headers} headers and {self._limits.max_header_bytes} bytes.",
        )
        raise _HeaderLimit

    def _arm(self, waiting_for: str, seconds: float) -> None:
        self._disarm()
        self._waiting_for = waiting_for
        self._timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting_for = None

    def _timed_out(self) -> None:
        waiting_for, self._timer = self._waiting_for, None
        self._waiting_for = None
        if self.transport.is_closing():
            return
        if waiting_for == "idle":
            self.transport.close()
            seconds = self._limits.keep_alive_timeout_seconds
            self._guard.closed("idle_timeout", f"{self._peer()} sent nothing for {seconds:g} s")
        elif waiting_for == "headers":
            seconds = self._limits.header_timeout_seconds
            self._answer_and_close(
                408,
                "invalid_request_error",
                "request_timeout",
                f"The request headers did not arrive within {seconds:g} s.",
                reason="header_timeout",
            )
        elif waiting_for == "body":
            self._body_timer_fired()

    def _body_timer_fired(self) -> None:
        idle = self._limits.body_idle_timeout_seconds
        deadline = self._limits.body_timeout_seconds
        now = self.loop.time()
        quiet = now - self._last_body_at
        if self.flow.read_paused:
            # the gateway paused reading (the app has not taken what it has): the client
            # is not the slow one; the whole-body clock restarts when reading resumes
            self._body_started_at = now
            self._arm("body", min(idle, deadline))
            return
        elapsed = now - self._body_started_at
        if elapsed >= deadline:
            self._answer_and_close(
                408,
                "invalid_request_error",
                "request_timeout",
                f"The request body did not arrive within {deadline:g} s.",
                reason="body_deadline",
            )
            return
        if quiet < idle:
            # a read came since the timer was armed: wait for the rest of the idle
            # period, or of the whole-body deadline if that comes first
            self._arm("body", min(idle - quiet, deadline - elapsed))
            return
        self._answer_and_close(
            408,
            "invalid_request_error",
            "request_timeout",
            f"The request body stalled: nothing arrived for {idle:g} s.",
            reason="body_timeout",
        )


class CoalescingTransport:
    """The client socket's transport, writing once per event-loop turn: uvicorn writes a
    response's status line and headers, then its body, each with its own `write`; on a
    socket whose reader waits on another core, each write is a send and a wake-up.
    Writes made in one turn are joined and sent together at the end of the turn (before
    the loop polls again), or as soon as the answer is complete (`flush`, from the
    protocol's `on_response_complete`: the app's work after answering runs in the same
    turn and must not delay it), so a whole answer costs one send, as nginx's writev does.

    Once an answer's first bytes are out, the rest of it writes through: a stream's
    chunks come one write a turn, and a flush scheduled per chunk was a loop callback
    each. The next request on the connection (`request_begins`) coalesces again."""

    __slots__ = ("_loop", "_pending", "_through", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._through = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._through:
            transport = self._transport
            if not transport.is_closing():  # as a flush drops what a gone client missed
                transport.write(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def request_begins(self) -> None:
        """A new request on the connection: its answer's first writes coalesce."""
        self._through = False

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what this turn wrote so far (the end-of-turn flush then finds nothing)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._transport.is_closing():
            return  # the client left after the write: nothing to send it to
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        self._through = True

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._pending)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    # what uvicorn calls on every request, without __getattr__'s detour
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _error_json(message: str, kind: str, code: str) -> bytes:
    return msgspec.json.encode(ErrorEnvelope(ErrorBody(message, kind, None, code)))
