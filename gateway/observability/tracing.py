"""Traces, the part that costs nothing: whether tracing is on, W3C trace context, and the
record one request fills in while it is served.

Tracing is on only when the standard OpenTelemetry variables ask for OTLP export
(:func:`tracing_settings`); otherwise the runtime holds no tracer, the Flow no trace, and
neither this module's records nor the OpenTelemetry SDK are touched by a request (the
SDK is imported by `observability/otlp_export.py`, itself imported only when on).

A request's spans are not live SDK objects. The pipeline notes when each stage ended and
when each upstream attempt started and ended, on a :class:`RequestTrace`; settle hands
the record to the exporter, which builds the whole tree at once with those times. The ids
are ours, drawn when the request starts, so the `traceparent` sent upstream names the
attempt span before the span exists.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol
from urllib.parse import urlsplit

# OpenTelemetry's names for the variables read here (and by the SDK, when on)
SDK_DISABLED = "OTEL_SDK_DISABLED"
TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"

_HEX = frozenset("0123456789abcdef")
# the longest `tracestate` passed on (the W3C limit: 32 members of at most 256 bytes is
# more than any upstream needs; a longer one is dropped, not cut)
MAX_TRACESTATE = 512
# a stream's last payloads kept for its finish reasons: Anthropic's message_delta is
# followed by message_stop, OpenAI's finish chunk by the usage chunk
_KEPT_LAST_PAYLOADS = 4


class TracingConfigError(ValueError):
    """The OTEL_* variables ask for something the gateway cannot do."""


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """Tracing is on: spans go by OTLP/HTTP to `endpoint` (the exporter reads the
    rest of the OTEL_EXPORTER_OTLP_* variables itself)."""

    endpoint: str


def tracing_settings(env: Mapping[str, str]) -> TracingSettings | None:
    """None (off) unless an OTLP endpoint is given or `OTEL_TRACES_EXPORTER=otlp`;
    `OTEL_SDK_DISABLED=true` and `OTEL_TRACES_EXPORTER=none` turn it off whatever else
    is set. Raises TracingConfigError for an exporter or protocol the gateway lacks."""
    if env.get(SDK_DISABLED, "").strip().lower() == "true":
        return None
    exporters = [e.strip().lower() for e in env.get(TRACES_EXPORTER, "").split(",") if e.strip()]
    if "none" in exporters:
        return None
    unsupported = [e for e in exporters if e != "otlp"]
    if unsupported:
        raise TracingConfigError(
            f"{TRACES_EXPORTER}={env[TRACES_EXPORTER]!r}: the gateway exports traces by OTLP "
            "only; set it to otlp (or none), or leave it unset"
        )
    traces_endpoint = env.get(TRACES_ENDPOINT, "").strip()
    endpoint = env.get(ENDPOINT, "").strip()
    if not (traces_endpoint or endpoint or exporters):
        return None
    for name in (TRACES_PROTOCOL, PROTOCOL):
        protocol = env.get(name, "").strip()
        if protocol:
            if protocol != "http/protobuf":
                raise TracingConfigError(
                    f"{name}={protocol!r}: the gateway exports OTLP over HTTP only; set it "
                    "to http/protobuf (a collector's port 4318), or leave it unset"
                )
            break
    if traces_endpoint:
        where = traces_endpoint
    elif endpoint:
        where = endpoint.rstrip("/") + "/v1/traces"
    else:
        where = "http://localhost:4318/v1/traces"
    parts = urlsplit(where)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TracingConfigError(
            f"OTLP endpoint {where!r} is not an http(s) URL "
            "(e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318)"
        )
    return TracingSettings(endpoint=where)


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A W3C `traceparent`: the caller's trace and span, and whether it samples."""

    trace_id: int
    span_id: int
    sampled: bool


def parse_traceparent(value: str | None) -> TraceParent | None:
    """The header's trace context, or None when absent or malformed (then the request
    starts a trace of its own, as the W3C spec says)."""
    if not value or len(value) < 55:
        return None
    fields = value.strip().lower().split("-")
    if len(fields) < 4:
        return None
    version, trace_hex, span_hex, flags = fields[:4]
    if (
        len(version) != 2
        or version == "ff"
        or len(trace_hex) != 32
        or len(span_hex) != 16
        or len(flags) != 2
        or not _HEX.issuperset(version + trace_hex + span_hex + flags)
        # version 00 has exactly four fields; later versions may append more
        or (version == "00" and len(fields) != 4)
    ):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, bool(int(flags, 16) & 1))


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def usable_tracestate(value: str | None) -> str | None:
    """The caller's `tracestate`, passed on upstream unchanged when it is within bounds."""
    if not value or len(value) > MAX_TRACESTATE or not value.isascii():
        return None
    return value


def server_address(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    port = parts.port
    if port is None:
        port = 443 if parts.scheme == "https" else 80 if parts.scheme == "http" else None
    return parts.hostname or "", port


class Tracer(Protocol):
    """What the pipeline sees of the exporter (observability/otlp_export.OtlpTracer)."""

    def begin(self, headers: Mapping[str, str], started: float) -> RequestTrace: ...

    def export(self, trace: RequestTrace, spans: Sequence[SpanFacts]) -> None: ...

    def export_counts(self) -> tuple[int, int, int]:
        """Spans exported, spans dropped, failed export calls, so far."""
        ...

    def shutdown(self, timeout_seconds: float = 5.0) -> None: ...


def open_tracer(env: Mapping[str, str]) -> Tracer | None:
    """The process's tracer when the environment turns tracing on, else None (and the
    SDK is not imported)."""
    settings = tracing_settings(env)
    if settings is None:
        return None
    from gateway.observability.otlp_export import OtlpTracer

    return OtlpTracer(settings, env)


# what an attribute may hold (OpenTelemetry's types, without the SDK)
Attribute = str | bool | int | float | list[str]


@dataclass(slots=True)
class SpanFacts:
    """One span as the pipeline describes it for the exporter. `parent_id` None makes
    it the root (a child of the caller's span, if any); `error` is its error.type."""

    name: str
    kind: Literal["server", "client", "internal"]
    span_id: int
    parent_id: int | None
    start: float
    end: float
    attributes: dict[str, Attribute]
    error: str | None = None
    error_message: str = ""


@dataclass(slots=True)
class AttemptTrace:
    """One upstream attempt: a CLIENT span. `failure` is the error.type of an attempt
    that failed; `end` stays None for the attempt that served (its end is when the
    answer or stream was read to the end, known at settle)."""

    span_id: int
    number: int
    model: str
    upstream_model: str
    provider: str
    start: float
    end: float | None = None
    failure: str | None = None
    url: str = ""

    def ended(self, failure: str) -> None:
        self.end = time.perf_counter()
        self.failure = failure


@dataclass(slots=True)
class RequestTrace:
    """What the pipeline notes about one request for its spans. Times are
    `time.perf_counter()` values; `epoch_ns` at `perf_origin` converts them."""

    trace_id: int
    root_span_id: int
    respond_span_id: int
    sampled: bool
    perf_origin: float
    epoch_ns: int
    # the caller's span (None: the trace starts here)
    parent: TraceParent | None = None
    tracestate: str | None = None
    # (stage name, perf time it ended), in order
    stages: list[tuple[str, float]] = field(default_factory=list)
    attempts: list[AttemptTrace] = field(default_factory=list)
    # the answer's bytes for its id, model and finish reasons: the whole body, or the
    # first and the last stream payloads
    answer: list[bytes] = field(default_factory=list)
    _rng: random.Random | None = None

    @classmethod
    def begin(
        cls,
        trace_id: int,
        parent: TraceParent | None,
        sampled: bool,
        started: float,
        rng: random.Random,
        tracestate: str | None = None,
    ) -> RequestTrace:
        return cls(
            trace_id=trace_id,
            root_span_id=_nonzero(rng, 64),
            respond_span_id=_nonzero(rng, 64),
            sampled=sampled,
            perf_origin=started,
            epoch_ns=time.time_ns() - int((time.perf_counter() - started) * 1e9),
            parent=parent,
            tracestate=tracestate,
            _rng=rng,
        )

    def new_span_id(self) -> int:
        assert self._rng is not None
        return _nonzero(self._rng, 64)

    def stage_done(self, name: str) -> None:
        self.stages.append((name, time.perf_counter()))

    def attempt_started(
        self, number: int, model: str, upstream_model: str, provider: str
    ) -> AttemptTrace:
        assert self._rng is not None
        attempt = AttemptTrace(
            _nonzero(self._rng, 64), number, model, upstream_model, provider, time.perf_counter()
        )
        self.attempts.append(attempt)
        return attempt

    def upstream_headers(self, url: str) -> dict[str, str]:
        """The trace headers for the current attempt's upstream request (its span is the
        parent of whatever the upstream records), noting where it went."""
        attempt = self.attempts[-1] if self.attempts else None
        span_id = attempt.span_id if attempt is not None else self.respond_span_id
        if attempt is not None:
            attempt.url = url
        headers = {"traceparent": format_traceparent(self.trace_id, span_id, self.sampled)}
        if self.tracestate is not None:
            headers["tracestate"] = self.tracestate
        return headers

    @property
    def response_traceparent(self) -> str:
        """What the client gets back: the gateway's root span in the client's trace."""
        return format_traceparent(self.trace_id, self.root_span_id, self.sampled)

    def keep_answer_piece(self, payloads: list[bytes]) -> None:
        """A stream's payloads of one read. The first payload (ids, models) and the last
        few (finish reasons) are kept."""
        if not payloads or not self.sampled:
            return
        if not self.answer:
            self.answer.append(payloads[0])
            payloads = payloads[1:]
        self.answer[1:] = (self.answer[1:] + payloads)[-_KEPT_LAST_PAYLOADS:]

    def epoch(self, perf: float) -> int:
        """A perf_counter time as Unix nanoseconds."""
        return self.epoch_ns + int((perf - self.perf_origin) * 1e9)


def new_trace_id(rng: random.Random) -> int:
    return _nonzero(rng, 128)


def _nonzero(rng: random.Random, bits: int) -> int:
    value = 0
    while value == 0:
        value = rng.getrandbits(bits)
    return value
