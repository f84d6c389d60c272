"""Structured logs: one JSON line per request (text in dev mode), written off the event loop.

The request pipeline builds one :class:`RequestLogEntry` when a request ends and hands it
to :meth:`AccessLog.request`. Formatting happens in the caller (a few microseconds); the
write to the stream happens in a :class:`LogPipeline` thread, so a slow log collector
never stalls the event loop. When the queue is full a line is dropped and counted rather
than blocking.

Every line, access or not, passes :func:`redact` last: anything shaped like a provider key
(`sk-...`, `AIza...`), a bearer token or a `password=`/`api_key:` value is masked. Message
content is logged only when the server config says `log_content: true`.
"""

from __future__ import annotations

import logging
import random
import re
import sys
import threading
import time
from collections import deque
from decimal import Decimal
from types import TracebackType
from typing import Any, Literal, TextIO

import msgspec

ACCESS_LOGGER = "gateway.access"
LogFormat = Literal["json", "text"]

_MASK = "***"


class _SecretPattern:
    """A regex run only when one of its lowercase `markers` occurs in the text: Python's
    regex engine costs ~30 ns per character per pattern, a substring test far less."""

    __slots__ = ("markers", "pattern", "replacement")

    def __init__(self, markers: tuple[str, ...], pattern: str, replacement: str) -> None:
        self.markers = markers
        self.pattern = re.compile(pattern)
        self.replacement = replacement


_SECRET_PATTERNS = (
    _SecretPattern(
        ("bearer", "basic"), r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]+", rf"\1 {_MASK}"
    ),
    _SecretPattern(
        (
            "api_key",
            "api-key",
            "apikey",
            "authorization",
            "password",
            "passwd",
            "secret",
            "access_token",
            "access-token",
            "accesstoken",
            "refresh_token",
            "refresh-token",
            "refreshtoken",
        ),
        r"(?i)\b(api[_-]?key|x-api-key|x-goog-api-key|authorization|password|passwd|"
        r"secret|access[_-]?token|refresh[_-]?token|client[_-]?secret)"
        # quotes may come escaped (`password=\"x\"` inside a JSON string): the mask
        # keeps the backslash, or the line would stop being JSON and keep the secret
        r"(\\?\"?'?\s*[:=]\s*\\?\"?'?)(?!\s|\*{3}|(?i:bearer|basic)\s)[^\s\"',;&}\\]+",
        rf"\1\2{_MASK}",
    ),
    _SecretPattern(("sk-", "pk-", "rk-"), r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}", rf"\1-{_MASK}"),
    _SecretPattern(("aiza",), r"\bAIza[0-9A-Za-z_\-]{20,}", f"AIza{_MASK}"),
    _SecretPattern(
        ("xox", "ghp_", "gho_", "ghs_", "gsk_", "xai-"),
        r"\b(xox[abpr]|ghp|gho|ghs|gsk|xai)[-_][A-Za-z0-9_\-]{10,}",
        rf"\1-{_MASK}",
    ),
)


def redact(text: str) -> str:
    """`text` with every key-shaped substring masked."""
    lowered = text.lower()
    for secret in _SECRET_PATTERNS:
        # plain loops, not any(genexpr): this runs on every access line
        for marker in secret.markers:
            if marker in lowered:
                text = secret.pattern.sub(secret.replacement, text)
                break
    return text


class RequestLogEntry(msgspec.Struct, omit_defaults=True):
    """What one finished request left behind. Times in milliseconds, cost in US dollars.

    `content` (the request's messages) is dropped unless content logging is on.

    Not keyword-only: the settle stage builds one per request positionally, in field
    order (msgspec matches ~500 instructions a keyword argument); the order is pinned by
    tests/pipeline/test_settle_records.py.
    """

    request_id: str
    status: int
    latency_ms: float
    tenant: str | None = None
    key_id: str | None = None
    route: str | None = None
    model: str | None = None
    provider: str | None = None
    deployment: str | None = None
    stream: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    tokens_estimated: bool = False
    cost_usd: Decimal | None = None
    ttft_ms: float | None = None
    upstream_ms: float | None = None
    retries: int = 0
    fallback: bool = False
    fallback_from: str | None = None
    fallback_reason: str | None = None
    # every failed attempt ("model:cause", retries included), candidates set aside
    # untried ("model:circuit_open|cooldown"), and whether panic mode served it
    attempts: str | None = None
    skipped: str | None = None
    panic: bool = False
    # the response cache: hit, miss or bypass where it applies
    cache: str | None = None
    # what the gateway changed in the request it sent upstream, as x-gateway-route's
    # `changed=` says it ("max_tokens:32000->8192,dropped-beta:...")
    changed: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    content: Any = None


class AccessLog:
    """Writes one record per request to the `gateway.access` logger (or `logger`).

    Given the process's :class:`LogPipeline`, lines go straight into its queue, formatted
    exactly as its handler would, without the `logging` module's per-record machinery
    (a LogRecord, handler locks): the access line is on every request's path.
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        log_content: bool = False,
        content_share: float = 1.0,
        pipeline: LogPipeline | None = None,
    ):
        self._logger = logger or logging.getLogger(ACCESS_LOGGER)
        self.log_content = log_content
        self._content_share = content_share
        self._pipeline = pipeline

    def wants_content(self) -> bool:
        """Whether this request's content goes in its line: content logging is on, and
        the request falls in the configured share (drawn per request)."""
        if not self.log_content:
            return False
        return self._content_share >= 1 or random.random() < self._content_share

    def request(self, entry: RequestLogEntry) -> None:
        if entry.content is not None and not self.log_content:
            entry = msgspec.structs.replace(entry, content=None)
        level = logging.WARNING if entry.status >= 500 else logging.INFO
        if not self._logger.isEnabledFor(level):
            return
        if self._pipeline is not None and self._pipeline.running:
            self._pipeline.write_request(self._logger.name, level, entry)
        else:
            self._logger.log(level, "request", extra={"request_entry": entry})


_STANDARD_ATTRIBUTES = frozenset(
    [*logging.LogRecord("", 0, "", 0, "", None, None).__dict__, "message", "asctime"]
)
_encoder = msgspec.json.Encoder(enc_hook=str, decimal_format="number")


class _Clock:
    """ISO 8601 UTC timestamps, the seconds part formatted once per second and the whole
    text once per millisecond."""

    __slots__ = ("_milli", "_second", "_stamp", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""
        self._milli = -1
        self._stamp = ""

    def iso(self, created: float) -> str:
        second = int(created)
        milli = int(created % 1 * 1000)
        if second != self._second:
            self._text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        elif milli == self._milli:
            return self._stamp
        self._milli = milli
        self._stamp = f"{self._text}.{milli:03d}Z"
        return self._stamp


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: v
        for k, v in record.__dict__.items()
        if k not in _STANDARD_ATTRIBUTES and k != "request_entry"
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the request's fields or the
    record's `extra` fields, then `exc` for an exception."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = _Clock()

    def format(self, record: logging.LogRecord) -> str:
        head: dict[str, Any] = {
            "ts": self.clock.iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry = getattr(record, "request_entry", None)
        if isinstance(entry, RequestLogEntry):
            body = _encoder.encode(entry)
            line = _encoder.encode(head)[:-1] + b"," + body[1:]
        else:
            head.update(_extras(record))
            if record.exc_info:
                head["exc"] = self.formatException(record.exc_info)
            line = _encoder.encode(head)
        return redact(line.decode())


class TextFormatter(logging.Formatter):
    """Human-readable lines for dev mode."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        entry = getattr(record, "request_entry", None)
        if isinstance(entry, RequestLogEntry):
            text = f"{ts} {record.levelname:<7} {_describe(entry)}"
        else:
            extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
            text = f"{ts} {record.levelname:<7} {record.name}: {record.getMessage()}"
            if extras:
                text += f" {extras}"
            if record.exc_info:
                text += "\n" + self.formatException(record.exc_info)
        return redact(text)


def _describe(entry: RequestLogEntry) -> str:
    parts = [
        f"{entry.status}",
        f"{entry.route or '-'} -> {entry.model or '-'}@{entry.provider or '-'}",
        f"{entry.latency_ms:.0f}ms",
    ]
    if entry.ttft_ms is not None:
        parts.append(f"ttft={entry.ttft_ms:.0f}ms")
    parts.append(f"tokens={entry.input_tokens}/{entry.output_tokens}")
    if entry.cost_usd is not None:
        parts.append(f"${entry.cost_usd:.6f}")
    if entry.retries:
        parts.append(f"retries={entry.retries}")
    if entry.fallback:
        parts.append("fallback from " + _fallbacks(entry))
    if entry.changed:
        parts.append(f"changed={entry.changed}")
    if entry.error_type:
        parts.append(f"error={entry.error_type}")
    parts.append(f"tenant={entry.tenant or '-'} id={entry.request_id}")
    if entry.content is not None:
        parts.append(f"content={_encoder.encode(entry.content).decode()}")
    return " ".join(parts)


def _fallbacks(entry: RequestLogEntry) -> str:
    """`gpt-4.1 (401), claude (circuit_open)` from the flow's `model:cause` pairs; a
    reason given apart applies to them all."""
    described = []
    for item in (entry.fallback_from or "-").split(","):
        model, _, cause = item.partition(":")
        cause = cause or entry.fallback_reason or ""
        described.append(f"{model} ({cause})" if cause else model)
    return ", ".join(described)


def _json_middle(logger_name: str, level: int) -> str:
    """`","level":...,"logger":...,"msg":"request",`: what follows the timestamp's text
    in a JSON access line, up to the entry's first field."""
    head = {"level": logging.getLevelName(level).lower(), "logger": logger_name, "msg": "request"}
    return '",' + _encoder.encode(head)[1:-1].decode() + ","


def formatter_for(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


class _LineBuffer:
    """Lines waiting for the writer thread: appended without waking it.

    A `queue.Queue` notifies its reader on every put, so each log line would hand the GIL
    to the writer thread and back; under load that cost more than formatting the line.
    Here the writer drains on a timer, and is woken early only when the buffer is half
    full (or on stop).
    """

    def __init__(self, capacity: int) -> None:
        self._lines: deque[str] = deque()
        self._capacity = capacity
        self._wake_at = max(1, capacity // 2)
        self.wake = threading.Event()
        self.dropped = 0

    def put(self, line: str) -> None:
        # deque.append and len are atomic under the GIL; the writer only pops from the left
        size = len(self._lines)
        if size >= self._capacity:
            self.dropped += 1
            return
        self._lines.append(line)
        if size + 1 == self._wake_at:
            self.wake.set()

    def drain(self) -> list[str]:
        lines = self._lines
        out: list[str] = []
        for _ in range(len(lines)):
            out.append(lines.popleft())
        return out


class _QueueingHandler(logging.Handler):
    """Formats in the caller and never blocks: a full buffer drops the line and counts it."""

    def __init__(self, lines: _LineBuffer) -> None:
        super().__init__()
        self._lines = lines

    @property
    def dropped(self) -> int:
        return self._lines.dropped

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._lines.put(line)


class LogPipeline:
    """Records go from any logger it is installed on, formatted, through a bounded queue, to
    a thread that writes whatever has queued up in one write. Use as a context manager, or
    `start()` then `stop()`."""

    def __init__(
        self,
        log_format: LogFormat = "json",
        *,
        stream: TextIO | None = None,
        queue_size: int = 10_000,
        flush_interval_seconds: float = 0.05,
    ) -> None:
        self._lines = _LineBuffer(queue_size)
        self._flush_interval = flush_interval_seconds
        self._stopping = False
        self.handler = _QueueingHandler(self._lines)
        self.handler.setFormatter(formatter_for(log_format))
        self._stream = stream if stream is not None else sys.stderr
        self._writer: threading.Thread | None = None
        self._installed: list[logging.Logger] = []
        self._write_failures = 0
        self._json_middles: dict[tuple[str, int], str] = {}

    @property
    def running(self) -> bool:
        return self._writer is not None and bool(self._installed)

    def write_request(self, logger_name: str, level: int, entry: RequestLogEntry) -> None:
        """The access-log fast path: one formatted line into the queue, never blocking."""
        self._lines.put(self._format_request(logger_name, level, entry))

    def _format_request(self, logger_name: str, level: int, entry: RequestLogEntry) -> str:
        """An access entry holds ids and names from the config and numbers; the only
        client-chosen text is the request id, the names in `changed` (fields, betas,
        tools the client sent) and content, when enabled, so only those are redacted
        rather than scanning the whole line."""
        now = time.time()
        if entry.content is not None:
            return self._format_request_redacted(logger_name, level, entry, now)
        request_id = redact(entry.request_id)
        if request_id != entry.request_id:
            entry = msgspec.structs.replace(entry, request_id=request_id)
        if entry.changed is not None:
            changed = redact(entry.changed)
            if changed != entry.changed:
                entry = msgspec.structs.replace(entry, changed=changed)
        formatter = self.handler.formatter
        if isinstance(formatter, JsonFormatter):
            # what JsonFormatter writes: {"ts","level","logger","msg"} then the entry's
            # fields, the constant middle encoded once per logger and level
            middle = self._json_middles.get((logger_name, level))
            if middle is None:
                middle = self._json_middles[(logger_name, level)] = _json_middle(logger_name, level)
            body = _encoder.encode(entry)
            return f'{{"ts":"{formatter.clock.iso(now)}{middle}{body[1:].decode()}'
        ts = time.strftime("%H:%M:%S", time.localtime(now))
        return f"{ts} {logging.getLevelName(level):<7} {_describe(entry)}"

    def _format_request_redacted(
        self, logger_name: str, level: int, entry: RequestLogEntry, now: float
    ) -> str:
        record = logging.LogRecord(logger_name, level, "", 0, "request", None, None)
        record.created = now
        record.request_entry = entry
        return self.handler.format(record)

    @property
    def dropped(self) -> int:
        """Lines dropped because the queue was full."""
        return self._lines.dropped + self._write_failures

    def install(self, logger: logging.Logger | None = None, level: int | str = "INFO") -> None:
        """Route `logger`'s records (the root logger's by default) through this pipeline."""
        target = logger if logger is not None else logging.getLogger()
        target.addHandler(self.handler)
        target.setLevel(level)
        self._installed.append(target)

    def start(self) -> None:
        if self._writer is None:
            self._stopping = False
            self._writer = threading.Thread(target=self._write_lines, name="log-writer")
            self._writer.daemon = True
            self._writer.start()

    def stop(self) -> None:
        """Detach from every logger, then write what is queued and end the thread."""
        for logger in self._installed:
            logger.removeHandler(self.handler)
        self._installed.clear()
        if self._writer is not None:
            self._stopping = True
            self._lines.wake.set()
            self._writer.join()
            self._writer = None

    def _write_lines(self) -> None:
        while True:
            self._lines.wake.wait(self._flush_interval)
            self._lines.wake.clear()
            # read before draining, so lines put before stop() are all written
            done = self._stopping
            lines = self._lines.drain()
            if lines:
                try:
                    self._stream.write("\n".join(lines) + "\n")
                    self._stream.flush()
                except (OSError, ValueError):
                    self._write_failures += len(lines)
            if done:
                return

    def __enter__(self) -> LogPipeline:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
