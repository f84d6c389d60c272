"""Traces, the part with the OpenTelemetry SDK: sampling, building a request's spans at
settle, and OTLP/HTTP export off the event loop. Imported only when tracing is on
(`tracing.tracing_settings`), so a gateway without OTEL_* variables never loads the SDK.

The SDK reads its own standard variables here: OTEL_SERVICE_NAME and
OTEL_RESOURCE_ATTRIBUTES (the resource; `service.name` defaults to "gateway"),
OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the sampler, parent-based always-on by
default), OTEL_EXPORTER_OTLP_[TRACES_]HEADERS/TIMEOUT/COMPRESSION/CERTIFICATE (the
exporter), OTEL_BSP_* (the batch processor).

A span is handed to the batch processor already ended, built as a `ReadableSpan` with
its recorded times: what the SDK's own spans become when they end, without their locks
and context switching while the request runs.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping, Sequence

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from gateway.observability.otlp_encode import export_request, resource_and_scope
from gateway.observability.tracing import (
    RequestTrace,
    SpanFacts,
    TraceParent,
    TracingSettings,
    new_trace_id,
    parse_traceparent,
    usable_tracestate,
)

log = logging.getLogger("gateway.tracing")

DEFAULT_SERVICE_NAME = "gateway"
SCOPE_NAME = "gateway"
_KINDS = {"server": SpanKind.SERVER, "client": SpanKind.CLIENT, "internal": SpanKind.INTERNAL}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class ExportCounts:
    """Spans exported and lost, and failed export calls, read by the runtime's
    once-a-second report into Prometheus. Each counter has one writer, so none needs a
    lock: the event loop counts what it hands over and what a full queue drops, the
    export thread what it took and how its exports went."""

    def __init__(self, queue_capacity: int) -> None:
        self._capacity = queue_capacity
        # the event loop's
        self._handed = 0
        self._dropped_full = 0
        # the export thread's
        self._taken = 0
        self._failed_spans = 0
        self.exported = 0
        self.export_failures = 0

    @property
    def dropped(self) -> int:
        return self._dropped_full + self._failed_spans

    def queued(self, spans: int = 1) -> None:
        """Spans handed to the batch processor: past its capacity, the processor's queue
        drops its oldest span for each new one."""
        waiting = self._handed - self._dropped_full - self._taken
        over = max(0, waiting + spans - self._capacity)
        self._handed += spans
        self._dropped_full += min(spans, over)

    def taken(self, spans: int, ok: bool) -> None:
        self._taken += spans
        if ok:
            self.exported += spans
        else:
            self._failed_spans += spans
            self.export_failures += 1


class CountingExporter(SpanExporter):
    """The OTLP exporter, counting what each export call did."""

    def __init__(self, inner: SpanExporter, counts: ExportCounts) -> None:
        self._inner = inner
        self._counts = counts

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            log.exception("exporting %d spans failed", len(spans))
            result = SpanExportResult.FAILURE
        self._counts.taken(len(spans), result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class OtlpHttpExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter (its endpoint, headers, TLS, compression, retries and
    timeout from the OTEL_* variables), with the request body written by
    `otlp_encode` instead of the SDK's message objects (~10x less CPU per span)."""

    def __init__(self, endpoint: str, resource: Resource, scope_name: str) -> None:
        super().__init__(endpoint=endpoint)
        self._resource_bytes, self._scope_bytes = resource_and_scope(
            resource.attributes, scope_name
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        body = export_request(spans, self._resource_bytes, self._scope_bytes)
        sent = self._client.export(body)
        return SpanExportResult.SUCCESS if sent.success else SpanExportResult.FAILURE


class OtlpTracer:
    """One per serving process (built in each worker after it started, so every worker
    has its own exporter thread)."""

    def __init__(
        self,
        settings: TracingSettings,
        environ: Mapping[str, str] | None = None,
        exporter: SpanExporter | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        # the SDK's provider reads the sampler and the resource from the environment
        provider = TracerProvider(shutdown_on_exit=False)
        self._sampler = provider.sampler
        # the default sampler's decision needs no SDK call: the caller's flag, else yes
        chosen = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
        self._default_sampler = chosen in ("", "parentbased_always_on")
        resource = provider.resource
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE_NAME}))
        self.resource = resource
        self.endpoint = settings.endpoint
        self._scope = InstrumentationScope(SCOPE_NAME)
        capacity = _positive_int(env.get("OTEL_BSP_MAX_QUEUE_SIZE"), 2048)
        self.counts = ExportCounts(capacity)
        self._processor = BatchSpanProcessor(
            CountingExporter(
                exporter or OtlpHttpExporter(settings.endpoint, resource, SCOPE_NAME), self.counts
            ),
            max_queue_size=capacity,
            schedule_delay_millis=_positive_int(env.get("OTEL_BSP_SCHEDULE_DELAY"), 5000),
            # a batch never larger than the queue (the SDK refuses that)
            max_export_batch_size=min(
                capacity, _positive_int(env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), 512)
            ),
        )
        self._rng = random.Random()

    def begin(self, headers: Mapping[str, str], started: float) -> RequestTrace:
        """A request's trace: the caller's (its `traceparent`), or a new one; sampled as
        the configured sampler says."""
        parent = parse_traceparent(headers.get("traceparent"))
        trace_id = parent.trace_id if parent is not None else new_trace_id(self._rng)
        return RequestTrace.begin(
            trace_id,
            parent,
            self._sampled(parent, trace_id),
            started,
            self._rng,
            tracestate=usable_tracestate(headers.get("tracestate")) if parent else None,
        )

    def _sampled(self, parent: TraceParent | None, trace_id: int) -> bool:
        if self._default_sampler:
            return parent.sampled if parent is not None else True
        context = None
        if parent is not None:
            remote = SpanContext(
                parent.trace_id,
                parent.span_id,
                is_remote=True,
                trace_flags=TraceFlags(1 if parent.sampled else 0),
            )
            context = trace_api.set_span_in_context(trace_api.NonRecordingSpan(remote))
        result = self._sampler.should_sample(context, trace_id, "request", SpanKind.SERVER)
        return result.decision is Decision.RECORD_AND_SAMPLE

    def export(self, trace: RequestTrace, spans: Sequence[SpanFacts]) -> None:
        """Hand the request's spans to the batch processor (the export itself happens
        on its thread); an unsampled trace exports nothing."""
        if not trace.sampled:
            return
        trace_id = trace.trace_id
        contexts = {
            span.span_id: SpanContext(trace_id, span.span_id, is_remote=False, trace_flags=_SAMPLED)
            for span in spans
        }
        parent = trace.parent
        remote_parent = (
            SpanContext(parent.trace_id, parent.span_id, is_remote=True, trace_flags=_SAMPLED)
            if parent is not None
            else None
        )
        self.counts.queued(len(spans))
        resource, scope, on_end = self.resource, self._scope, self._processor.on_end
        for span in spans:
            # the facts are this request's own: their attributes are handed over as they are
            attributes: dict[str, AttributeValue] = span.attributes  # type: ignore[assignment]
            status = _UNSET
            if span.error is not None:
                status = Status(StatusCode.ERROR, span.error_message or None)
                attributes["error.type"] = span.error
            on_end(
                ReadableSpan(
                    span.name,
                    context=contexts[span.span_id],
                    parent=contexts.get(span.parent_id) if span.parent_id else remote_parent,
                    resource=resource,
                    attributes=attributes,
                    kind=_KINDS[span.kind],
                    status=status,
                    start_time=trace.epoch(span.start),
                    end_time=trace.epoch(span.end),
                    instrumentation_scope=scope,
                )
            )

    def export_counts(self) -> tuple[int, int, int]:
        counts = self.counts
        return counts.exported, counts.dropped, counts.export_failures

    def shutdown(self, timeout_seconds: float = 5.0) -> None:
        """Export what is queued (within `timeout_seconds`) and stop the export thread.

        BatchSpanProcessor.shutdown() waits up to 30 s for a collector that does not
        answer; its batch processor takes the bound (SDK 1.45, pinned)."""
        batches = getattr(self._processor, "_batch_processor", None)
        if batches is not None:
            batches.shutdown(timeout_millis=int(timeout_seconds * 1000))
        else:
            self._processor.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_seconds: float = 5.0) -> bool:
        return self._processor.force_flush(int(timeout_seconds * 1000))


def _positive_int(value: str | None, default: int) -> int:
    try:
        number = int(value) if value else default
    except ValueError:
        return default
    return number if number > 0 else default
