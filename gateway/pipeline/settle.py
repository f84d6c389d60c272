"""Settle stage, after the response: metrics and the access log for one request.

It runs once per request whatever happened (served, refused, failed, abandoned), and
never raises into the request path.
"""

from __future__ import annotations

from gateway.observability.logs import AccessLog, RequestLogEntry
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.flow import Flow


def record_metrics(metrics: GatewayMetrics, flow: Flow, finished: float) -> None:
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


def log_entry(flow: Flow, finished: float) -> RequestLogEntry:
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
        error_code=flow.error_code,
    )


def write_access_log(access_log: AccessLog, flow: Flow, finished: float) -> None:
    access_log.request(log_entry(flow, finished))
