"""What the settle stage records for a request (its metrics, its access-log entry) is what
it recorded before the metrics went through one call per request: the per-metric calls
and the entry built field by field, kept here as the reference."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.observability.logs import RequestLogEntry
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.flow import Flow, ServingOption
from gateway.pipeline.settle import log_entry, record_metrics
from gateway.usage import Usage


@dataclass
class Caller:
    tenant_id: str
    key_id: str


@dataclass
class Deployment:
    key: str


@dataclass
class Request:
    stream: bool


def flows() -> list[Flow]:
    """Served, streamed, refused, failed over, abandoned: each branch settle takes."""
    out = []
    for i in range(24):
        flow = Flow(request_id=f"req_{i:04d}", started=100.0, created=0, view=None)  # type: ignore[arg-type]
        flow.status = 200
        flow.route = ("auto", "coding", "")[i % 3]
        flow.requested_model = "instant"
        flow.counted_in_flight = i % 11 != 5
        flow.request = Request(stream=i % 2 == 1) if i % 7 != 3 else None  # type: ignore[assignment]
        flow.finished = 100.0 + 0.001 * (i + 1) + (30.0 if i == 9 else 0.0)
        if i % 5 != 4:
            flow.caller = Caller(("acme", "beta")[i % 2], f"key-{i % 3}")  # type: ignore[assignment]
        if i % 6 == 0:  # refused before any upstream
            flow.status = (429, 401, 404)[i % 3]
            flow.error_code = "rate_limited"
            out.append(flow)
            continue
        model = ("gpt-4.1", "claude", "deepseek")[i % 3]
        flow.served_by = ServingOption(
            model=model,
            settings=None,  # type: ignore[arg-type]
            deployment=Deployment(f"{model}/d"),  # type: ignore[arg-type]
        )
        flow.provider = ("openai", "anthropic", "")[i % 3] if i != 13 else "openai"
        flow.upstream_started = 100.0002
        flow.upstream_seconds = 0.0008 * (i + 1)
        flow.retries = i % 3
        if i % 4 == 1:
            flow.fallback_from = ["gpt-4.1:502", "claude:circuit_open"]
            flow.failed_attempts = ["gpt-4.1:502", "gpt-4.1:502"]
            flow.skipped = ["gemini:cooldown"]
            flow.panic = i == 5
        if i % 8 != 7:
            flow.usage = Usage(
                input_tokens=500 + i,
                cached_input_tokens=(i % 3) * 10,
                cache_write_tokens=i % 2,
                output_tokens=16 * (i % 4),
                reasoning_tokens=i % 5,
                estimated=i % 9 == 0,
            )
        flow.cost = None if i % 10 == 8 else Decimal(i % 4) / 1000
        if flow.request is not None and flow.request.stream:
            flow.first_token_at = 100.0005 if i != 11 else None
            flow.streamed_chunks = i % 5 * 10 if i != 15 else 2
        if i == 17:
            flow.status = 502
        out.append(flow)
    return out


def reference_record_metrics(metrics: GatewayMetrics, flow: Flow, finished: float) -> None:
    route = flow.route or "none"
    model = flow.served_by.model if flow.served_by else None
    provider = flow.provider or None
    stream = bool(flow.request and flow.request.stream)
    ttft = flow.first_token_at - flow.started if flow.first_token_at is not None else None
    upstream = flow.upstream_seconds if flow.upstream_started is not None else None
    if flow.counted_in_flight:
        metrics.request_finished(
            route, model, provider, flow.status, finished - flow.started, ttft, upstream, stream
        )
    if model is None or provider is None:
        return
    tenant = flow.caller.tenant_id if flow.caller else "none"
    metrics.routing_decision(route, model)
    for fallback in flow.fallback_from:
        from_model, _, reason = fallback.partition(":")
        metrics.fallback(route, from_model, reason)
    if flow.usage is not None:
        metrics.tokens(model, provider, tenant, flow.usage)
        metrics.token_lengths(model, flow.usage.input_tokens, flow.usage.output_tokens)
    if flow.cost is not None:
        metrics.spend(tenant, model, provider, flow.cost)
    if stream and flow.first_token_at is not None and flow.streamed_chunks > 1:
        gaps = (finished - flow.first_token_at) / (flow.streamed_chunks - 1)
        metrics.inter_token_latency(model, gaps)


def reference_log_entry(flow: Flow, finished: float) -> RequestLogEntry:
    usage = flow.usage
    return RequestLogEntry(
        request_id=flow.request_id,
        status=flow.status,
        latency_ms=round((finished - flow.started) * 1000, 3),
        tenant=flow.caller.tenant_id if flow.caller else None,
        key_id=flow.caller.key_id if flow.caller else None,
        route=flow.route or None,
        model=flow.served_by.model if flow.served_by else (flow.requested_model or None),
        provider=flow.provider or None,
        deployment=flow.served_by.deployment_id if flow.served_by else None,
        stream=bool(flow.request and flow.request.stream),
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        cached_tokens=usage.cached_input_tokens if usage else 0,
        reasoning_tokens=usage.reasoning_tokens if usage else 0,
        tokens_estimated=bool(usage and usage.estimated),
        cost_usd=flow.cost,
        ttft_ms=(
            round((flow.first_token_at - flow.started) * 1000, 3)
            if flow.first_token_at is not None
            else None
        ),
        upstream_ms=round(flow.upstream_seconds * 1000, 3) if flow.upstream_started else None,
        retries=flow.retries,
        fallback=bool(flow.fallback_from),
        fallback_from=",".join(flow.fallback_from) or None,
        attempts=",".join(flow.failed_attempts) or None,
        skipped=",".join(flow.skipped) or None,
        panic=flow.panic,
        error_code=flow.error_code,
    )


def exposition(metrics: GatewayMetrics) -> str:
    body = metrics.render()[0].decode()
    return "\n".join(line for line in body.splitlines() if "_created" not in line)


def settle_all(metrics: GatewayMetrics, record: Any, rounds: int) -> None:
    for _ in range(rounds):
        for flow in flows():
            if flow.counted_in_flight:
                metrics.request_started(flow.route or "none")
            assert flow.finished is not None
            record(metrics, flow, flow.finished)


def test_metrics_after_many_requests_are_exactly_what_the_per_metric_calls_made() -> None:
    for tenant_labels in (True, False):
        settled = GatewayMetrics(CollectorRegistry(), tenant_labels=tenant_labels)
        reference = GatewayMetrics(CollectorRegistry(), tenant_labels=tenant_labels)
        settle_all(settled, record_metrics, 50)
        settle_all(reference, reference_record_metrics, 50)
        text = exposition(settled)
        assert text == exposition(reference)
        assert 'gateway_requests_total{code="200",model="gpt-4.1"' in text
        assert "gateway_inter_token_latency_seconds_count" in text


def test_the_access_log_entry_is_the_one_built_field_by_field() -> None:
    for flow in flows():
        assert flow.finished is not None
        assert log_entry(flow, flow.finished) == reference_log_entry(flow, flow.finished)


# settle.log_entry builds the entry positionally: a field moved or added in between must
# change it too
LOG_ENTRY_FIELDS = (
    "request_id", "status", "latency_ms", "tenant", "key_id", "route", "model", "provider",
    "deployment", "stream", "input_tokens", "output_tokens", "cached_tokens",
    "reasoning_tokens", "tokens_estimated", "cost_usd", "ttft_ms", "upstream_ms", "retries",
    "fallback", "fallback_from", "fallback_reason", "attempts", "skipped", "panic", "cache",
    "changed", "error_type", "error_code", "content",
)  # fmt: skip


def test_log_entry_fields_are_in_the_order_settle_passes_them() -> None:
    assert RequestLogEntry.__struct_fields__ == LOG_ENTRY_FIELDS
