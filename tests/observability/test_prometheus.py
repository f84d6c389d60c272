"""The shipped Prometheus config, alert rules and Grafana dashboard, checked by the real
tools: promtool, and a Prometheus that scrapes a `/metrics` endpoint and evaluates every
expression."""

from __future__ import annotations

import json
import subprocess

import pytest
from prometheus_client import CollectorRegistry

from gateway.observability.metrics import GatewayMetrics
from tests.observability.prometheus_server import (
    DASHBOARDS,
    MISSING_BINARY,
    PROMETHEUS_DIR,
    alert_expressions,
    binary,
    dashboard_expressions,
    expression_problems,
)
from tests.observability.traffic import MetricsEndpoint, record_mixed_traffic


def require(name: str) -> str:
    path = binary(name)
    if path is None:
        pytest.skip(MISSING_BINARY.format(name=name))
    return path


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_the_prometheus_config_and_its_rule_files():
    result = promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules():
    result = promtool("check", "rules", str(PROMETHEUS_DIR / "alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_cover_errors_budget_circuits_redis_and_backend_queues():
    expressions = " ".join(e.promql for e in alert_expressions())
    for metric in (
        'gateway_requests_total{status_class="5xx"}',
        "gateway_budget_used_ratio) > 0.9",
        "gateway_circuit_state",
        "gateway_redis_errors_total",
        "deriv(gateway_backend_queue_depth",
    ):
        assert metric in expressions


def test_the_dashboard_has_a_row_for_each_concern_and_a_cost_per_1k_requests_panel():
    dashboard = json.loads((DASHBOARDS / "gateway.json").read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == [
        "Traffic and errors",
        "Latency and time to first token",
        "Tokens and spend",
        "Routing and fallbacks",
        "Rate limiting and state",
        "GPU backends",
        "Response cache",
        "Admin and console",
        "Tracing",
        "Online evaluation",
    ]
    titles = [p["title"] for p in dashboard["panels"]]
    assert "Cost per 1k requests by model" in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(
        t["datasource"]["uid"] == "prometheus"
        for p in dashboard["panels"]
        for t in p.get("targets", [])
    )


def test_every_dashboard_panel_and_alert_parses_and_every_panel_returns_data():
    require("prometheus")
    metrics = GatewayMetrics(CollectorRegistry(), tenant_labels=True)
    record_mixed_traffic(metrics)

    with MetricsEndpoint(metrics) as endpoint:
        problems = expression_problems(endpoint.url, lambda: record_mixed_traffic(metrics))

    assert len(dashboard_expressions()) >= 30
    assert problems == []
