"""Tracing's pure parts: when the OTEL_* variables turn it on, W3C trace context, the
answer facts spans carry, and the SDK side's sampling and counts (with the SDK's own
in-memory exporter standing for a collector)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.cli.serve import report_tracing
from gateway.observability.otlp_encode import export_request, resource_and_scope
from gateway.observability.otlp_export import ExportCounts, OtlpTracer
from gateway.observability.tracing import (
    RequestTrace,
    SpanFacts,
    TracingConfigError,
    TracingSettings,
    format_traceparent,
    parse_traceparent,
    tracing_settings,
)
from gateway.pipeline.trace_spans import answer_facts

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OTEL_SERVICE_NAME": "gw"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
        {"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "},
    ],
)
def test_tracing_is_off_unless_asked_for(env: dict[str, str]) -> None:
    assert tracing_settings(env) is None


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t.example/custom",
            },
            "https://t.example/custom",
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "http://localhost:4318/v1/traces"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"},
            "http://c:4318/v1/traces",
        ),
    ],
)
def test_an_otlp_endpoint_turns_tracing_on(env: dict[str, str], endpoint: str) -> None:
    assert tracing_settings(env) == TracingSettings(endpoint=endpoint)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "is not an http"),
    ],
)
def test_what_the_gateway_cannot_export_to_is_refused_by_name(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(TracingConfigError, match=named):
        tracing_settings(env)


def test_serve_refuses_to_start_on_an_unsupported_exporter_and_says_where_traces_go(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert report_tracing({"OTEL_TRACES_EXPORTER": "jaeger"}) is False
    assert "OTLP only" in capsys.readouterr().err
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://user:pw@c:4318/v1/traces"}
    assert report_tracing(env) is True
    out = capsys.readouterr().out
    assert "http://user:***@c:4318/v1/traces" in out and "pw" not in out


def test_a_traceparent_is_read_as_the_w3c_spec_says() -> None:
    parent = parse_traceparent(VALID)
    assert parent is not None
    assert parent.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert parent.span_id == 0x00F067AA0BA902B7
    assert parent.sampled
    assert format_traceparent(parent.trace_id, parent.span_id, parent.sampled) == VALID
    unsampled = parse_traceparent(VALID[:-2] + "00")
    assert unsampled is not None and not unsampled.sampled
    # a later version may append fields; version 00 may not
    assert parse_traceparent("01" + VALID[2:] + "-extra") is not None


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        VALID + "-extra",
        "ff" + VALID[2:],
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e47-3600f067aa0ba902b7-01",
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(value: str | None) -> None:
    assert parse_traceparent(value) is None


def test_the_answer_facts_are_read_from_every_api_the_gateway_answers_in() -> None:
    openai_body = {
        "id": "chatcmpl-1",
        "model": "gpt-4.1-2025",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {}}],
    }
    facts = answer_facts([json.dumps(openai_body).encode()])
    assert (facts.id, facts.model, facts.finish_reasons) == (
        "chatcmpl-1",
        "gpt-4.1-2025",
        ["tool_calls"],
    )
    anthropic_stream = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude-x"}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    ]
    facts = answer_facts([json.dumps(e).encode() for e in anthropic_stream])
    assert (facts.id, facts.model, facts.finish_reasons) == ("msg_1", "claude-x", ["end_turn"])
    responses_stream = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_text.delta", "delta": "text"},
        {
            "type": "response.completed",
            "response": {"id": "resp_1", "model": "m", "status": "completed"},
        },
    ]
    facts = answer_facts([json.dumps(e).encode() for e in responses_stream])
    assert (facts.id, facts.model, facts.finish_reasons) == ("resp_1", "m", ["completed"])
    assert answer_facts([b"not json", b"[1]"]).finish_reasons == []


def test_a_stream_keeps_its_first_payload_and_its_last_few() -> None:
    trace = RequestTrace.begin(1, None, True, time.perf_counter(), random.Random(1))
    trace.keep_answer_piece([b"first", b"second"])
    for n in range(10):
        trace.keep_answer_piece([f"p{n}".encode()])
    trace.keep_answer_piece([])
    assert trace.answer == [b"first", b"p6", b"p7", b"p8", b"p9"]


class _Refusing(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.FAILURE


def _spans(trace: RequestTrace) -> list[SpanFacts]:
    now = time.perf_counter()
    return [
        SpanFacts("root", "server", trace.root_span_id, None, now - 0.01, now, {"a": 1}),
        SpanFacts(
            "child", "client", trace.new_span_id(), trace.root_span_id, now - 0.005, now, {}, "503"
        ),
    ]


def test_spans_are_built_in_the_callers_trace_with_their_recorded_times() -> None:
    memory = InMemorySpanExporter()
    tracer = OtlpTracer(TracingSettings("http://unused"), {}, exporter=memory)
    trace = tracer.begin({"traceparent": VALID}, time.perf_counter())
    facts = _spans(trace)
    tracer.export(trace, facts)
    assert tracer.force_flush()
    root, child = sorted(memory.get_finished_spans(), key=lambda s: s.name, reverse=True)
    assert isinstance(root, ReadableSpan)
    assert root.context is not None and child.context is not None
    assert root.context.trace_id == child.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert root.parent is not None and root.parent.span_id == 0x00F067AA0BA902B7
    assert root.parent.is_remote
    assert child.parent is not None and child.parent.span_id == root.context.span_id
    assert child.attributes == {"error.type": "503"}
    assert root.end_time is not None and root.start_time is not None
    assert root.end_time - root.start_time == pytest.approx(10_000_000, abs=1000)
    assert root.resource.attributes["service.name"] == "gateway"
    assert tracer.export_counts() == (2, 0, 0)
    tracer.shutdown(1)


def test_the_parent_based_ratio_sampler_follows_the_caller_and_the_ratio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    memory = InMemorySpanExporter()
    tracer = OtlpTracer(TracingSettings("http://unused"), {}, exporter=memory)
    sampled_parent = tracer.begin({"traceparent": VALID}, time.perf_counter())
    unsampled_parent = tracer.begin({"traceparent": VALID[:-2] + "00"}, time.perf_counter())
    own = tracer.begin({}, time.perf_counter())
    assert (sampled_parent.sampled, unsampled_parent.sampled, own.sampled) == (True, False, False)
    for trace in (sampled_parent, unsampled_parent, own):
        tracer.export(trace, _spans(trace))
    tracer.force_flush()
    assert len(memory.get_finished_spans()) == 2
    tracer.shutdown(1)


def test_a_full_queue_drops_and_counts_each_span_past_its_capacity() -> None:
    counts = ExportCounts(queue_capacity=3)
    for _ in range(4):
        counts.queued()
    assert (counts.exported, counts.dropped) == (0, 1)
    counts.taken(3, ok=True)
    counts.queued()
    assert (counts.exported, counts.dropped, counts.export_failures) == (3, 1, 0)
    counts.taken(1, ok=False)
    assert (counts.exported, counts.dropped, counts.export_failures) == (3, 2, 1)


def test_a_refused_export_counts_its_spans_as_dropped() -> None:
    tracer = OtlpTracer(TracingSettings("http://unused"), {}, exporter=_Refusing())
    for _ in range(2):
        trace = tracer.begin({}, time.perf_counter())
        tracer.export(trace, _spans(trace))
    tracer.force_flush()
    assert tracer.export_counts() == (0, 4, 1)
    tracer.shutdown(1)


def test_importing_the_serving_path_loads_no_tracing_sdk() -> None:
    probe = (
        "import sys, gateway.api.app, gateway.pipeline.runtime, gateway.cli.serve; "
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace', "
        "'opentelemetry.exporter', 'gateway.observability.otlp_export'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_request_body_decodes_as_the_sdks_own_encoding_of_the_same_spans() -> None:
    memory = InMemorySpanExporter()
    tracer = OtlpTracer(TracingSettings("http://unused"), {}, exporter=memory)
    trace = tracer.begin({"traceparent": VALID}, time.perf_counter())
    facts = _spans(trace)
    facts[0].attributes.update(
        {
            "gen_ai.response.finish_reasons": ["stop", "length"],
            "gateway.cost_usd": 0.00125,
            "gateway.stream": False,
            "gen_ai.usage.input_tokens": 2**40,
            "gateway.route.score": -0.5,
            "gen_ai.request.model": "módel-ü",
        }
    )
    facts[1].error_message = "upstream said 503"
    tracer.export(trace, facts)
    tracer.force_flush()
    spans = memory.get_finished_spans()
    resource, scope = resource_and_scope(tracer.resource.attributes, "gateway")
    ours = ExportTraceServiceRequest.FromString(export_request(spans, resource, scope))
    theirs = encode_spans(spans)
    assert ours == theirs
    tracer.shutdown(1)
