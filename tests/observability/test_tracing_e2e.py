"""OpenTelemetry traces from a real `gateway serve` to a real OTLP/HTTP receiver, with the
official `openai` SDK as the client and the fake OpenAI upstream behind it.

The gateway runs with `PYTHONPROFILEIMPORTTIME`, so its log lists every module it
imported: a gateway without OTEL_* variables must never have loaded the trace SDK or an
exporter.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.redis_server import RedisServer, free_port

CLIENT_KEY = "sk-tracing-client-key-123"
UPSTREAM_KEY = "sk-upstream-tracing-secret-456"
PROMPT_WORD = "zebraprompt" + secrets.token_hex(4)
STAGES = [
    "gateway.authenticate",
    "gateway.decode",
    "gateway.plan",
    "gateway.admit",
    "gateway.respond",
    "gateway.settle",
]


def config(upstream: str) -> dict[str, Any]:
    return {
        "server": {},
        "store": {"kind": "memory"},
        "providers": {"fake": openai_provider(upstream)},
    }


def policy() -> dict[str, Any]:
    return {
        "models": {
            "chat-model": {
                "deployments": [{"provider": "fake", "upstream_model": "upstream-chat"}],
                "prices": {"input": 1, "output": 2},
            }
        },
        "tenants": {"team-a": {"keys": [{"id": "a1", "hash": key_hash(CLIENT_KEY)}]}},
    }


def gateway_env(**extra: str) -> dict[str, str]:
    env = {
        "FAKE_UPSTREAM_KEY": UPSTREAM_KEY,
        "PYTHONPROFILEIMPORTTIME": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
        "OTEL_TRACES_EXPORTER": "",
        "OTEL_SDK_DISABLED": "",
    }
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIFake]:
    with OpenAIFake() as fake:
        yield fake


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def traced(upstream: OpenAIFake, receiver: OtlpReceiver) -> Iterator[GatewayProcess]:
    env = gateway_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME="gateway-under-test",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=e2e",
        # export within a tenth of a second, not the default five
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    with GatewayProcess(config(upstream.base_url), policy(), env=env) as gateway:
        yield gateway


def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)


def caller_traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def spans_of(receiver: OtlpReceiver, trace_id: str, count: int) -> list[ReceivedSpan]:
    return [
        s
        for s in receiver.wait_for(
            lambda spans: len([s for s in spans if s.trace_id == trace_id]) >= count
        )
        if s.trace_id == trace_id
    ]


def by_name(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def metric(gateway: GatewayProcess, name: str) -> float:
    """An unlabelled series' value on the gateway's /metrics (-1 when absent)."""
    text = httpx.get(gateway.url + "/metrics").text
    lines = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(lines[0].split()[1]) if lines else -1.0


def assert_no_secret_or_prompt(spans: list[ReceivedSpan]) -> None:
    for span in spans:
        text = repr(span.attributes) + repr(span.resource) + repr(span.headers)
        for secret in (CLIENT_KEY, UPSTREAM_KEY, PROMPT_WORD):
            assert secret not in text, (span.name, secret)


def test_a_retried_request_gives_the_callers_trace_its_stages_and_two_attempt_spans(
    traced: GatewayProcess, upstream: OpenAIFake, receiver: OtlpReceiver
) -> None:
    header, trace_id, caller_span = caller_traceparent()
    upstream.enqueue(Reply.error(503, "overloaded"))
    before = len(upstream.requests)
    raw = client(traced).chat.completions.with_raw_response.create(
        model="chat-model",
        messages=[{"role": "user", "content": f"say {PROMPT_WORD}"}],
        max_tokens=50,
        temperature=0.5,
        extra_headers={"traceparent": header},
    )
    answer = raw.parse()
    spans = spans_of(receiver, trace_id, 1 + len(STAGES) + 2)

    root = by_name(spans, "chat chat-model")
    assert root.kind == "server"
    assert root.parent_span_id == caller_span
    # the client learns which span served it
    assert raw.headers["traceparent"] == f"00-{trace_id}-{root.span_id}-01"
    assert root.resource["service.name"] == "gateway-under-test"
    assert root.resource["deployment.environment.name"] == "e2e"
    assert answer.usage is not None
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "chat-model",
        "gen_ai.provider.name": "fake",
        "gen_ai.response.model": answer.model,
        "gen_ai.response.id": answer.id,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": answer.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": answer.usage.completion_tokens,
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.temperature": 0.5,
        "http.response.status_code": 200,
        "gateway.tenant": "team-a",
        "gateway.model": "chat-model",
        "gateway.attempts": 2,
        "gateway.retries": 1,
        "gateway.request_id": raw.headers["x-request-id"],
    }
    assert {k: root.attributes.get(k) for k in expected} == expected
    assert root.attributes["gateway.cost_usd"] == pytest.approx(
        float(raw.headers["x-gateway-cost-usd"])
    )
    assert not root.failed

    stages = [s for s in spans if s.parent_span_id == root.span_id]
    assert sorted(s.name for s in stages) == sorted(STAGES)
    ordered = sorted(stages, key=lambda s: s.start_ns)
    assert [s.name for s in ordered] == STAGES
    # each stage starts where the one before it ended
    for earlier, later in itertools.pairwise(ordered):
        assert earlier.end_ns == later.start_ns
    assert all(root.start_ns <= s.start_ns and s.end_ns <= root.end_ns for s in stages)

    respond = by_name(spans, "gateway.respond")
    attempts = sorted((s for s in spans if s.kind == "client"), key=lambda s: s.start_ns)
    assert [a.name for a in attempts] == ["chat upstream-chat", "chat upstream-chat"]
    assert all(a.parent_span_id == respond.span_id for a in attempts)
    failed, served = attempts
    assert failed.failed and failed.attributes["error.type"] == "503"
    assert not served.failed and "error.type" not in served.attributes
    assert [a.attributes["gateway.attempt"] for a in attempts] == [1, 2]
    assert served.attributes["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
    assert served.attributes["server.address"] == "127.0.0.1"
    assert served.attributes["server.port"] == httpx.URL(upstream.base_url).port
    # each upstream request carried its own attempt span as the parent
    sent = [r.headers["traceparent"] for r in upstream.requests[before:]]
    assert sent == [f"00-{trace_id}-{a.span_id}-01" for a in attempts]
    assert_no_secret_or_prompt(spans)


def test_a_stream_without_traceparent_starts_a_trace_with_its_usage(
    traced: GatewayProcess, receiver: OtlpReceiver
) -> None:
    with client(traced).chat.completions.with_streaming_response.create(
        model="chat-model",
        messages=[{"role": "user", "content": f"stream {PROMPT_WORD} please"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        traceparent = response.headers["traceparent"]
        chunks = list(response.parse())
    usage = chunks[-1].usage
    assert usage is not None
    _, trace_id, root_span, flags = traceparent.split("-")
    assert flags == "01"
    spans = spans_of(receiver, trace_id, 1 + len(STAGES) + 1)
    root = by_name(spans, "chat chat-model")
    assert root.span_id == root_span
    assert root.parent_span_id == ""
    assert root.attributes["gateway.stream"] is True
    assert root.attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert root.attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert root.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert root.attributes["gen_ai.response.id"] == chunks[0].id
    (attempt,) = [s for s in spans if s.kind == "client"]
    # the upstream call lasts as long as the stream it sent
    assert attempt.end_ns <= by_name(spans, "gateway.respond").end_ns
    assert attempt.end_ns > attempt.start_ns
    assert_no_secret_or_prompt(spans)


def test_a_refused_request_ends_its_trace_in_the_stage_that_refused_it(
    traced: GatewayProcess, receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = caller_traceparent()
    refusing = openai.OpenAI(base_url=traced.base_url, api_key="sk-wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        refusing.chat.completions.create(
            model="chat-model",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"traceparent": header},
        )
    spans = spans_of(receiver, trace_id, 3)
    root = by_name(spans, "chat")
    assert root.failed and root.attributes["http.response.status_code"] == 401
    authenticate = by_name(spans, "gateway.authenticate")
    assert (
        authenticate.failed
        and authenticate.attributes["error.type"] == root.attributes["error.type"]
    )
    assert not [s for s in spans if s.name in ("gateway.decode", "gateway.respond")]
    assert "sk-wrong-key" not in repr([s.attributes for s in spans])


def test_an_unsampled_caller_is_answered_in_its_trace_and_nothing_is_exported(
    traced: GatewayProcess, upstream: OpenAIFake, receiver: OtlpReceiver
) -> None:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    raw = client(traced).chat.completions.with_raw_response.create(
        model="chat-model",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"traceparent": f"00-{trace_id}-{span_id}-00"},
    )
    returned = raw.headers["traceparent"]
    assert returned.startswith(f"00-{trace_id}-") and returned.endswith("-00")
    assert upstream.requests[-1].headers["traceparent"].startswith(f"00-{trace_id}-")
    # a sampled request after it is exported, so the unsampled one had its chance
    header, sampled_trace, _ = caller_traceparent()
    client(traced).chat.completions.create(
        model="chat-model",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"traceparent": header},
    )
    spans_of(receiver, sampled_trace, 1 + len(STAGES) + 1)
    assert [s for s in receiver.snapshot() if s.trace_id == trace_id] == []


def test_exports_and_export_failures_are_counted_in_prometheus(
    traced: GatewayProcess, receiver: OtlpReceiver
) -> None:
    def counter(name: str) -> float:
        return metric(traced, name)

    header, trace_id, _ = caller_traceparent()
    client(traced).chat.completions.create(
        model="chat-model",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"traceparent": header},
    )
    spans_of(receiver, trace_id, 1 + len(STAGES) + 1)
    receiver.wait_for(lambda _: counter("gateway_trace_spans_exported_total") >= 8)
    failures_before = counter("gateway_trace_export_failures_total")
    dropped_before = counter("gateway_trace_spans_dropped_total")
    # a collector that refuses the data (400: not retried by the exporter)
    receiver.refuse = 400
    try:
        client(traced).chat.completions.create(
            model="chat-model", messages=[{"role": "user", "content": "hi"}]
        )
        receiver.wait_for(
            lambda _: counter("gateway_trace_export_failures_total") > failures_before
        )
    finally:
        receiver.refuse = None
    assert counter("gateway_trace_spans_dropped_total") >= dropped_before + 8


def test_without_otel_variables_nothing_is_exported_and_the_sdk_is_never_imported(
    upstream: OpenAIFake, receiver: OtlpReceiver, traced: GatewayProcess
) -> None:
    header, trace_id, _ = caller_traceparent()
    with GatewayProcess(config(upstream.base_url), policy(), env=gateway_env()) as untraced:
        raw = client(untraced).chat.completions.with_raw_response.create(
            model="chat-model",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"traceparent": header},
        )
        assert "traceparent" not in raw.headers
        assert "traceparent" not in upstream.requests[-1].headers
        log = untraced.log()
    assert "import time:" in log  # the import list is there to be read
    # (redis-py imports opentelemetry.sdk.metrics whenever it is installed, for metrics
    # of its own it records only when asked to: not the trace SDK, nor an exporter)
    tracing_modules = ("opentelemetry.sdk.trace", "opentelemetry.exporter", "otlp_export")
    assert [m for m in tracing_modules if m in log] == []
    # the same check sees them in a gateway that traces
    assert [m for m in tracing_modules if m in traced.log()] == list(tracing_modules)
    assert [s for s in receiver.snapshot() if s.trace_id == trace_id] == []


def test_every_worker_exports_its_own_requests_spans(
    upstream: OpenAIFake, receiver: OtlpReceiver, redis_server: RedisServer
) -> None:
    """`--workers 2`: each worker builds its exporter once it runs, so spans from
    whichever worker served a request reach the collector."""
    settings = config(upstream.base_url)
    settings["store"] = {"kind": "redis", "redis_url": redis_server.url, "cluster": False}
    env = gateway_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY="100")
    traces = []
    with GatewayProcess(settings, policy(), env=env, workers=2) as gateway:
        for _ in range(8):
            header, trace_id, _ = caller_traceparent()
            # a new connection each time, so the kernel may hand it to either worker
            with openai.OpenAI(
                base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0
            ) as fresh:
                fresh.chat.completions.create(
                    model="chat-model",
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"traceparent": header},
                )
            traces.append(trace_id)
        wanted = set(traces)
        spans = receiver.wait_for(
            lambda spans: wanted <= {s.trace_id for s in spans if s.kind == "server"}
        )
    roots = [s for s in spans if s.kind == "server" and s.trace_id in wanted]
    assert len(roots) == len(traces)
    # the workers' processes: one resource instance each (how many served is the kernel's)
    assert 1 <= len({s.resource["service.instance.id"] for s in roots}) <= 2


def test_with_the_collector_down_requests_are_served_and_the_failed_exports_counted(
    upstream: OpenAIFake,
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = gateway_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=nowhere,
        OTEL_BSP_SCHEDULE_DELAY="100",
        # the exporter's retries give up after a second (the Python SDK reads seconds)
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    with GatewayProcess(config(upstream.base_url), policy(), env=env) as gateway:
        for _ in range(3):
            answer = client(gateway).chat.completions.create(
                model="chat-model", messages=[{"role": "user", "content": "hi"}]
            )
            assert answer.choices[0].message.content
        deadline = time.monotonic() + 30
        # a failed export, and at least one request's spans lost with it
        while (
            metric(gateway, "gateway_trace_export_failures_total") < 1
            or metric(gateway, "gateway_trace_spans_dropped_total") < 8
        ):
            assert time.monotonic() < deadline, "no failed export counted"
            time.sleep(0.2)
        assert metric(gateway, "gateway_trace_spans_exported_total") == 0
