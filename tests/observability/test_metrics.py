from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import (
    ALL_TENANTS,
    OVERFLOW,
    GatewayMetrics,
    reset_multiprocess_dir,
)
from gateway.usage import Usage
from tests.observability.traffic import record_mixed_traffic

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: GatewayMetrics) -> Samples:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    return parse(body.decode())


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def new_metrics(**kwargs: bool) -> GatewayMetrics:
    return GatewayMetrics(CollectorRegistry(), **kwargs)


def test_a_request_of_10_input_and_5_output_tokens_moves_the_token_counters_by_exactly_that():
    metrics = new_metrics(tenant_labels=True)
    metrics.tokens("gpt-4.1", "openai", "acme", Usage(input_tokens=7, output_tokens=1))
    before = scrape(metrics)

    metrics.tokens("gpt-4.1", "openai", "acme", Usage(input_tokens=10, output_tokens=5))
    after = scrape(metrics)

    labels = {"model": "gpt-4.1", "provider": "openai", "tenant": "acme"}
    for kind, expected in (("input", 10), ("output", 5)):
        moved = value(after, "gateway_tokens_total", kind=kind, **labels) - value(
            before, "gateway_tokens_total", kind=kind, **labels
        )
        assert moved == expected
    assert value(after, "gateway_tokens_total", kind="cached", **labels) == 0


def test_cached_and_reasoning_tokens_are_counted_as_parts_of_input_and_output():
    metrics = new_metrics(tenant_labels=True)
    usage = Usage(
        input_tokens=100,
        cached_input_tokens=60,
        cache_write_tokens=30,
        output_tokens=20,
        reasoning_tokens=8,
    )
    metrics.tokens("m", "p", "t", usage)
    samples = scrape(metrics)
    counted = {
        kind: value(samples, "gateway_tokens_total", model="m", provider="p", tenant="t", kind=kind)
        for kind in ("input", "cached", "cache_write", "output", "reasoning")
    }
    assert counted == {
        "input": 100,
        "cached": 60,
        "cache_write": 30,
        "output": 20,
        "reasoning": 8,
    }


def test_a_finished_request_is_counted_by_route_model_provider_and_status_class():
    metrics = new_metrics()
    metrics.request_started("auto")
    metrics.request_started("auto")
    in_flight = scrape(metrics)
    metrics.request_finished("auto", "gpt-4.1", "openai", 200, 1.25, 0.2, 1.0, stream=True)
    metrics.request_finished("auto", None, None, 429, 0.002, None, None, stream=False)
    samples = scrape(metrics)

    assert value(in_flight, "gateway_requests_in_flight", route="auto") == 2
    assert value(samples, "gateway_requests_in_flight", route="auto") == 0
    ok = {"route": "auto", "model": "gpt-4.1", "provider": "openai"}
    assert value(samples, "gateway_requests_total", status_class="2xx", code="200", **ok) == 1
    refused = {"route": "auto", "model": "none", "provider": "none"}
    assert value(samples, "gateway_requests_total", status_class="4xx", code="429", **refused) == 1
    duration = {**ok, "stream": "true"}
    assert value(samples, "gateway_request_duration_seconds_sum", **duration) == 1.25
    assert value(samples, "gateway_request_duration_seconds_bucket", le="1.0", **duration) == 0
    assert value(samples, "gateway_request_duration_seconds_bucket", le="2.0", **duration) == 1
    ttft = {"model": "gpt-4.1", "provider": "openai"}
    assert value(samples, "gateway_time_to_first_token_seconds_count", **ttft) == 1
    assert value(samples, "gateway_time_to_first_token_seconds_sum", **ttft) == 0.2


def test_gateway_overhead_is_total_minus_upstream_time_and_all_of_it_without_upstream():
    metrics = new_metrics()
    metrics.request_started("auto")
    metrics.request_finished("auto", "m", "p", 200, 1.0004, None, 1.0, stream=False)
    metrics.request_started("auto")
    metrics.request_finished("auto", None, None, 401, 0.0003, None, None, stream=False)
    samples = scrape(metrics)

    assert value(samples, "gateway_overhead_seconds_count") == 2
    assert value(samples, "gateway_overhead_seconds_sum") == pytest.approx(0.0007)
    assert value(samples, "gateway_overhead_seconds_bucket", le="0.00025") == 0
    assert value(samples, "gateway_overhead_seconds_bucket", le="0.0005") == 2
    assert value(samples, "gateway_upstream_duration_seconds_count", provider="p") == 1


def test_spend_is_counted_in_dollars_per_tenant_model_and_provider():
    metrics = new_metrics(tenant_labels=True)
    metrics.spend("acme", "gpt-4.1", "openai", Decimal("0.00012"))
    metrics.spend("acme", "gpt-4.1", "openai", Decimal("0.00008"))
    metrics.spend("acme", "gpt-4.1", "openai", Decimal(0))
    samples = scrape(metrics)

    labels = {"tenant": "acme", "model": "gpt-4.1", "provider": "openai"}
    assert value(samples, "gateway_spend_usd_total", **labels) == pytest.approx(0.0002)


def test_without_tenant_labels_no_tenant_id_appears_and_budget_shows_the_fullest_tenant():
    metrics = new_metrics(tenant_labels=False)
    metrics.tokens("m", "p", "acme-secret-tenant", Usage(input_tokens=3))
    metrics.spend("acme-secret-tenant", "m", "p", Decimal("0.5"))
    metrics.budget_used("acme-secret-tenant", 0.95)
    metrics.budget_used("beta", 0.2)
    body, _ = metrics.render()

    assert b"acme-secret-tenant" not in body
    assert b"beta" not in body
    samples = parse(body.decode())
    assert value(samples, "gateway_budget_used_ratio", tenant=ALL_TENANTS) == 0.95
    assert value(samples, "gateway_spend_usd_total", tenant=ALL_TENANTS, model="m", provider="p")


def test_with_tenant_labels_budget_is_reported_per_tenant():
    metrics = new_metrics(tenant_labels=True)
    metrics.budget_used("acme", 0.95)
    metrics.budget_used("beta", 0.2)
    metrics.budget_used("acme", 0.1)  # a new period began
    samples = scrape(metrics)
    assert value(samples, "gateway_budget_used_ratio", tenant="acme") == 0.1
    assert value(samples, "gateway_budget_used_ratio", tenant="beta") == 0.2


def test_routing_resilience_and_backend_events_are_each_counted_once():
    metrics = new_metrics()
    record_mixed_traffic(metrics)
    samples = scrape(metrics)

    assert value(samples, "gateway_routing_decisions_total", route="auto", model="gpt-4.1") == 1
    assert (
        value(
            samples,
            "gateway_fallbacks_total",
            route="auto",
            from_model="gpt-4.1",
            reason="upstream_unavailable",
        )
        == 1
    )
    assert value(samples, "gateway_retries_total", provider="openai", cause="502") == 1
    assert value(samples, "gateway_circuit_state", deployment="openai/gpt-4.1") == 2
    assert value(samples, "gateway_rate_limited_total", scope="tenant", kind="requests") == 1
    assert value(samples, "gateway_redis_errors_total", op="admit") == 1
    assert value(samples, "gateway_redis_latency_seconds_count", op="admit") == 1
    assert value(samples, "gateway_policy_reloads_total", result="success") == 1
    assert value(samples, "gateway_policy_reloads_total", result="failure") == 1
    assert value(samples, "gateway_ledger_queue_depth") == 3
    assert value(samples, "gateway_ledger_write_failures_total") == 1
    replica = "http://emulator-1:30000/v1"
    assert value(samples, "gateway_backend_in_flight_requests", replica=replica) == 12
    assert value(samples, "gateway_backend_queue_depth", replica=replica) == 3
    assert value(samples, "gateway_backend_kv_cache_usage_ratio", replica=replica) == 0.41
    assert value(samples, "gateway_backend_prefix_cache_hit_ratio", replica=replica) == 0.62
    assert value(samples, "gateway_inter_token_latency_seconds_count", model="emulated-llama") == 3
    assert value(samples, "gateway_request_input_tokens_sum", model="emulated-llama") == 100
    assert value(samples, "gateway_request_output_tokens_bucket", model="emulated-llama", le="32.0")


def test_circuit_state_follows_the_breaker_back_to_closed():
    metrics = new_metrics()
    metrics.circuit_state("d", "open")
    metrics.circuit_state("d", "half_open")
    assert value(scrape(metrics), "gateway_circuit_state", deployment="d") == 1
    metrics.circuit_state("d", "closed")
    assert value(scrape(metrics), "gateway_circuit_state", deployment="d") == 0


def test_a_backend_value_the_server_does_not_report_stays_unset():
    metrics = new_metrics()
    metrics.backend("r", in_flight=4, queue_depth=None, kv_usage=None, cache_hit_rate=None)
    samples = scrape(metrics)
    assert value(samples, "gateway_backend_in_flight_requests", replica="r") == 4
    assert ("gateway_backend_queue_depth", frozenset({("replica", "r")})) not in samples


def test_label_sets_past_the_limit_fold_into_one_overflow_series():
    metrics = GatewayMetrics(CollectorRegistry(), max_series_per_metric=3)
    for i in range(10):
        metrics.routing_decision("auto", f"model-{i}")
    samples = scrape(metrics)

    series = [key for key in samples if key[0] == "gateway_routing_decisions_total"]
    assert len(series) == 4
    assert value(samples, "gateway_routing_decisions_total", route=OVERFLOW, model=OVERFLOW) == 7


def test_every_metric_follows_prometheus_naming_conventions():
    metrics = new_metrics()
    record_mixed_traffic(metrics)
    body, _ = metrics.render()
    families = list(text_string_to_metric_families(body.decode()))

    assert len(families) >= 25
    for family in families:
        assert family.name.startswith("gateway_"), family.name
        if family.type == "counter":
            assert any(s.name == f"{family.name}_total" for s in family.samples), family.name
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_tokens")), family.name
        for sample in family.samples:
            assert not {"request_id", "key", "api_key"} & set(sample.labels), sample


def test_multiprocess_mode_needs_the_environment_variable_before_start(tmp_path: Path):
    with pytest.raises(ValueError, match="PROMETHEUS_MULTIPROC_DIR"):
        GatewayMetrics(CollectorRegistry(), multiprocess_dir=str(tmp_path))


WORKER = textwrap.dedent(
    """
    import sys
    from gateway.observability.metrics import GatewayMetrics
    from gateway.usage import Usage

    requests = int(sys.argv[1])
    metrics = GatewayMetrics.from_environment(tenant_labels=True)
    for _ in range(requests):
        metrics.request_started("auto")
        metrics.request_finished("auto", "m", "p", 200, 0.5, 0.1, 0.4, stream=True)
        metrics.tokens("m", "p", "acme", Usage(input_tokens=10, output_tokens=5))
    metrics.request_started("auto")  # still in flight when the worker stops
    metrics.circuit_state("d", "open" if requests == 3 else "closed")
    """
)

RENDER = textwrap.dedent(
    """
    import sys
    from gateway.observability.metrics import GatewayMetrics

    metrics = GatewayMetrics.from_environment()
    sys.stdout.write(metrics.render()[0].decode())
    """
)


def test_counters_from_two_worker_processes_add_up_in_one_render(tmp_path: Path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(n)], env=env) for n in (3, 4)]
    assert [worker.wait(timeout=60) for worker in workers] == [0, 0]

    rendered = subprocess.run(
        [sys.executable, "-c", RENDER, str(workers[0].pid)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    both = parse(rendered)

    ok = {"route": "auto", "model": "m", "provider": "p", "status_class": "2xx", "code": "200"}
    assert value(both, "gateway_requests_total", **ok) == 7
    tokens = {"model": "m", "provider": "p", "tenant": "acme"}
    assert value(both, "gateway_tokens_total", kind="input", **tokens) == 70
    assert value(both, "gateway_tokens_total", kind="output", **tokens) == 35
    duration = {"route": "auto", "model": "m", "provider": "p", "stream": "true"}
    assert value(both, "gateway_request_duration_seconds_count", **duration) == 7
    assert value(both, "gateway_request_duration_seconds_bucket", le="0.5", **duration) == 7
    assert value(both, "gateway_requests_in_flight", route="auto") == 2
    assert value(both, "gateway_circuit_state", deployment="d") == 2


def test_resetting_the_multiprocess_dir_forgets_a_previous_runs_counters(tmp_path: Path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", WORKER, "3"], env=env, check=True, timeout=60)
    assert list(tmp_path.glob("*.db"))

    reset_multiprocess_dir(str(tmp_path))
    subprocess.run([sys.executable, "-c", WORKER, "4"], env=env, check=True, timeout=60)
    rendered = subprocess.run(
        [sys.executable, "-c", RENDER, "0"], env=env, capture_output=True, text=True, check=True
    ).stdout
    samples = parse(rendered.split("# ---\n")[0])

    ok = {"route": "auto", "model": "m", "provider": "p", "status_class": "2xx", "code": "200"}
    assert value(samples, "gateway_requests_total", **ok) == 4
