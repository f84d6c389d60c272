"""The settle stage's one-call metrics (`GatewayMetrics.request_settled`, children cached
per label set, values written straight on prometheus-client's value objects) export
exactly what recording each metric through prometheus-client's own API exports: the same
series, in the same order, with the same values, in one process and in multiprocess mode.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from prometheus_client import CollectorRegistry

from gateway.observability.metrics import ALL_TENANTS, NONE, GatewayMetrics
from gateway.usage import Usage


@dataclass
class Finished:
    """What settle knows about one finished request."""

    route: str = "auto"
    model: str | None = "gpt-4.1"
    provider: str | None = "openai"
    tenant: str = "acme"
    status: int = 200
    stream: bool = False
    in_flight: bool = True
    duration: float = 0.5
    ttft: float | None = None
    upstream: float | None = 0.4
    usage: Usage | None = None
    cost: Decimal | None = None
    fallbacks: list[str] = field(default_factory=list)
    inter_token: float | None = None


def traffic() -> list[Finished]:
    """Requests covering each branch: refused, failed, served, streamed, fallbacks, every
    token kind, zero cost, values on bucket bounds, past the last bound, zero, NaN."""
    usage = Usage(input_tokens=500, output_tokens=16)
    every_kind = Usage(
        input_tokens=100,
        cached_input_tokens=60,
        cache_write_tokens=30,
        output_tokens=20,
        reasoning_tokens=8,
    )
    requests = [
        Finished(model=None, provider=None, status=429, duration=0.002, upstream=None),
        Finished(status=401, model=None, provider=None, upstream=None, in_flight=False),
        Finished(usage=usage, cost=Decimal("0.00014672")),
        Finished(usage=usage, cost=Decimal("0.00014672"), duration=1.0, upstream=1.0),
        Finished(usage=usage, cost=Decimal(0), duration=0.25, upstream=0.2500004),
        Finished(usage=usage, duration=700.0, upstream=0.0),
        Finished(usage=Usage(), cost=Decimal("1.5"), tenant="beta", model="claude"),
        Finished(
            stream=True,
            ttft=0.05,
            usage=every_kind,
            cost=Decimal("0.002"),
            inter_token=0.0025,
            provider="anthropic",
        ),
        Finished(stream=True, ttft=0.0, usage=usage, inter_token=float("nan")),
        Finished(stream=True, ttft=61.0, usage=usage, inter_token=5.0, upstream=None),
        Finished(
            status=502,
            fallbacks=["gpt-4.1:502", "claude:circuit_open"],
            model="deepseek",
            provider="deepseek",
            usage=Usage(input_tokens=262_144, output_tokens=300_000),
            cost=Decimal("0.3"),
        ),
        Finished(route="coding", model="", provider="openai", usage=usage),
        Finished(route="none", model="gpt-4.1", provider=None, usage=usage),
        Finished(in_flight=False, usage=usage, cost=Decimal("0.1")),
        Finished(duration=0.0001, upstream=0.2, usage=Usage(input_tokens=16)),
    ]
    # past max_series_per_metric (set low in one test): label sets fold into overflow
    requests += [
        Finished(route=f"r{i % 7}", model=f"m{i % 5}", usage=usage, cost=Decimal("0.01"))
        for i in range(40)
    ]
    return requests * 3


def settled_in_one_call(metrics: GatewayMetrics, requests: list[Finished]) -> None:
    for r in requests:
        if r.in_flight:
            metrics.request_started(r.route)
        metrics.request_settled(
            r.route,
            r.model,
            r.provider,
            r.tenant,
            r.status,
            r.stream,
            r.in_flight,
            r.duration,
            r.ttft,
            r.upstream,
            r.usage,
            r.cost,
            r.fallbacks,
            r.inter_token,
        )


def recorded_through_prometheus_client(metrics: GatewayMetrics, requests: list[Finished]) -> None:
    """The settle stage's metrics as it recorded them before, through `labels()`,
    `inc()` and `observe()` on the public metric objects."""
    tenant_of = (lambda t: t) if metrics.tenant_labels else (lambda t: ALL_TENANTS)
    for r in requests:
        model = r.model or NONE
        provider = r.provider or NONE
        if r.in_flight:
            metrics.requests_in_flight.labels(r.route).inc()
            metrics.requests_in_flight.labels(r.route).dec()
            code = str(r.status)
            metrics.requests_total.labels(r.route, model, provider, f"{code[0]}xx", code).inc()
            stream = "true" if r.stream else "false"
            metrics.request_duration.labels(r.route, model, provider, stream).observe(r.duration)
            if r.ttft is not None:
                metrics.ttft.labels(model, provider).observe(r.ttft)
            if r.upstream is not None:
                metrics.upstream_duration.labels(provider).observe(r.upstream)
                metrics.overhead_seconds.observe(max(0.0, r.duration - r.upstream))
            else:
                metrics.overhead_seconds.observe(r.duration)
        if r.model is None or r.provider is None:
            continue
        tenant = tenant_of(r.tenant)
        metrics.routing_decisions_total.labels(r.route, r.model).inc()
        for fallback in r.fallbacks:
            from_model, _, reason = fallback.partition(":")
            metrics.fallbacks_total.labels(r.route, from_model, reason).inc()
        if r.usage is not None:
            u = r.usage
            for kind, count in (
                ("input", u.input_tokens),
                ("cached", u.cached_input_tokens),
                ("cache_write", u.cache_write_tokens),
                ("output", u.output_tokens),
                ("reasoning", u.reasoning_tokens),
            ):
                if count > 0:
                    metrics.tokens_total.labels(r.model, r.provider, tenant, kind).inc(count)
            metrics.input_tokens_per_request.labels(r.model).observe(u.input_tokens)
            metrics.output_tokens_per_request.labels(r.model).observe(u.output_tokens)
        if r.cost is not None and r.cost > 0:
            metrics.spend_total.labels(tenant, r.model, r.provider).inc(float(r.cost))
        if r.inter_token is not None:
            metrics.inter_token.labels(r.model).observe(r.inter_token)


def exposition(metrics: GatewayMetrics) -> str:
    """The rendered text without `_created` samples (the time each series was made)."""
    body = metrics.render()[0].decode()
    return "\n".join(line for line in body.splitlines() if "_created" not in line)


def test_one_call_per_request_exports_what_prometheus_clients_api_exports() -> None:
    for tenant_labels in (True, False):
        fast = GatewayMetrics(CollectorRegistry(), tenant_labels=tenant_labels)
        reference = GatewayMetrics(CollectorRegistry(), tenant_labels=tenant_labels)
        settled_in_one_call(fast, traffic())
        recorded_through_prometheus_client(reference, traffic())
        assert exposition(fast) == exposition(reference)
        assert "gateway_tokens_total" in exposition(fast)


def test_the_per_metric_methods_export_what_prometheus_clients_api_exports() -> None:
    """`request_finished`, `tokens`, `spend`... (the calls other stages and tools make)."""
    fast = GatewayMetrics(CollectorRegistry(), tenant_labels=True)
    reference = GatewayMetrics(CollectorRegistry(), tenant_labels=True)
    requests = traffic()
    for r in requests:
        if r.in_flight:
            fast.request_started(r.route)
            fast.request_finished(
                r.route, r.model, r.provider, r.status, r.duration, r.ttft, r.upstream, r.stream
            )
        if r.model is None or r.provider is None:
            continue
        fast.routing_decision(r.route, r.model)
        for fallback in r.fallbacks:
            from_model, _, reason = fallback.partition(":")
            fast.fallback(r.route, from_model, reason)
        if r.usage is not None:
            fast.tokens(r.model, r.provider, r.tenant, r.usage)
            fast.token_lengths(r.model, r.usage.input_tokens, r.usage.output_tokens)
        if r.cost is not None:
            fast.spend(r.tenant, r.model, r.provider, r.cost)
        if r.inter_token is not None:
            fast.inter_token_latency(r.model, r.inter_token)
    recorded_through_prometheus_client(reference, requests)
    assert exposition(fast) == exposition(reference)


def test_label_sets_past_the_limit_fold_into_overflow_as_before() -> None:
    fast = GatewayMetrics(CollectorRegistry(), max_series_per_metric=4)
    reference = GatewayMetrics(CollectorRegistry(), max_series_per_metric=4)
    settled_in_one_call(fast, traffic())
    # the reference caps nothing: compare what overflow holds with what the capped
    # label sets held
    recorded_through_prometheus_client(reference, traffic())
    text = exposition(fast)
    assert 'route="(overflow)"' in text
    routes = {
        line.split('route="')[1].split('"')[0] for line in text.splitlines() if 'route="' in line
    }
    assert len(routes - {"(overflow)"}) <= 4
    total = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_requests_total{")
    )
    assert total == sum(1 for r in traffic() if r.in_flight)


def test_a_histogram_value_lands_in_the_bucket_prometheus_client_puts_it_in() -> None:
    values = [0.0, -1.0, 0.05, 0.0500001, 1.0, 600.0, 601.0, math.inf, -math.inf, math.nan]
    fast = GatewayMetrics(CollectorRegistry())
    reference = GatewayMetrics(CollectorRegistry())
    for v in values:
        fast.inter_token_latency("m", v)
        fast.redis_latency("admit", v)
        fast.overhead(v)
        reference.inter_token.labels("m").observe(v)
        reference.redis_latency_seconds.labels("admit").observe(v)
        reference.overhead_seconds.observe(v)
    assert exposition(fast) == exposition(reference)


MULTIPROCESS = textwrap.dedent(
    """
    import sys
    from gateway.observability.metrics import GatewayMetrics
    from tests.observability import test_metrics_fast_path as t

    metrics = GatewayMetrics.from_environment(tenant_labels=True)
    if sys.argv[1] == "fast":
        t.settled_in_one_call(metrics, t.traffic())
    else:
        t.recorded_through_prometheus_client(metrics, t.traffic())
    sys.stdout.write(metrics.render()[0].decode())
    """
)


def test_multiprocess_mode_writes_the_same_values(tmp_path: Path) -> None:
    rendered = {}
    for path in ("fast", "reference"):
        directory = tmp_path / path
        directory.mkdir()
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
        rendered[path] = subprocess.run(
            [sys.executable, "-c", MULTIPROCESS, path],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    assert "gateway_requests_total" in rendered["fast"]
    # the multiprocess collector's family order follows its files: compare line sets
    assert sorted(rendered["fast"].splitlines()) == sorted(rendered["reference"].splitlines())
