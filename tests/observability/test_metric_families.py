"""The exposition's families: every `gateway_*` metric's name, type and label names, as a
scrape sees them. Dashboards, alert rules (deploy/) and docs name these; a change here is
a change users see, so it is made on purpose, in this list, never by a refactor."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import GatewayMetrics

# (name as scraped, type, label names sorted); taken from the exposition before
# GatewayMetrics._build was split by family
FAMILIES = [
    ("gateway_requests_total", "counter", ("code", "model", "provider", "route", "status_class")),
    ("gateway_requests_in_flight", "gauge", ("route",)),
    ("gateway_request_duration_seconds", "histogram", ("model", "provider", "route", "stream")),
    ("gateway_upstream_duration_seconds", "histogram", ("provider",)),
    ("gateway_time_to_first_token_seconds", "histogram", ("model", "provider")),
    ("gateway_inter_token_latency_seconds", "histogram", ("model",)),
    ("gateway_overhead_seconds", "histogram", ()),
    ("gateway_tokens_total", "counter", ("kind", "model", "provider", "tenant")),
    ("gateway_spend_usd_total", "counter", ("model", "provider", "tenant")),
    ("gateway_budget_used_ratio", "gauge", ("tenant",)),
    ("gateway_request_input_tokens", "histogram", ("model",)),
    ("gateway_request_output_tokens", "histogram", ("model",)),
    ("gateway_routing_decisions_total", "counter", ("model", "route")),
    ("gateway_fallbacks_total", "counter", ("from_model", "reason", "route")),
    ("gateway_learned_fallbacks_total", "counter", ("reason", "route")),
    ("gateway_retries_total", "counter", ("cause", "provider")),
    ("gateway_breaker_panics_total", "counter", ("deployment", "route")),
    ("gateway_breaker_fail_fast_total", "counter", ("route",)),
    ("gateway_deployment_cooldowns_total", "counter", ("deployment",)),
    ("gateway_circuit_state", "gauge", ("deployment",)),
    ("gateway_rate_limited_total", "counter", ("kind", "scope")),
    ("gateway_admission_grants_total", "counter", ("outcome",)),
    ("gateway_redis_errors_total", "counter", ("op",)),
    ("gateway_redis_latency_seconds", "histogram", ("op",)),
    ("gateway_policy_reloads_total", "counter", ("result",)),
    ("gateway_connections_closed_total", "counter", ("reason",)),
    ("gateway_ledger_queue_depth", "gauge", ()),
    ("gateway_limits_enforced", "gauge", ()),
    ("gateway_ledger_write_failures_total", "counter", ()),
    ("gateway_cache_lookups_total", "counter", ("result", "route")),
    ("gateway_cache_writes_total", "counter", ("result", "route")),
    ("gateway_cache_bytes_total", "counter", ("direction", "route")),
    ("gateway_cache_saved_usd_total", "counter", ("model", "tenant")),
    ("gateway_trace_spans_exported_total", "counter", ()),
    ("gateway_trace_spans_dropped_total", "counter", ()),
    ("gateway_trace_export_failures_total", "counter", ()),
    ("gateway_backend_in_flight_requests", "gauge", ("replica",)),
    ("gateway_backend_queue_depth", "gauge", ("replica",)),
    ("gateway_backend_kv_cache_usage_ratio", "gauge", ("replica",)),
    ("gateway_backend_prefix_cache_hit_ratio", "gauge", ("replica",)),
    ("gateway_admin_changes_total", "counter", ("action", "outcome")),
    ("gateway_runtime_keys", "gauge", ("status",)),
    ("gateway_runtime_tenants", "gauge", ()),
    ("gateway_runtime_keys_version", "gauge", ()),
    ("gateway_runtime_keys_sync_age_seconds", "gauge", ()),
    ("gateway_console_logins_total", "counter", ("outcome",)),
    ("gateway_route_quality_total", "counter", ("route", "status")),
    # online evaluation (gateway/observability/evaluation_metrics.py)
    ("gateway_evaluation_dropped_total", "counter", ("reason",)),
    ("gateway_evaluation_enqueued_total", "counter", ()),
    ("gateway_evaluation_group_spend_usd", "gauge", ("kind", "model", "reference", "route")),
    ("gateway_evaluation_labels_total", "counter", ("source",)),
    ("gateway_evaluation_quality_ratio", "gauge", ("kind", "model", "reference", "route")),
    ("gateway_evaluation_quality_ratio_high", "gauge", ("kind", "model", "reference", "route")),
    ("gateway_evaluation_quality_ratio_low", "gauge", ("kind", "model", "reference", "route")),
    ("gateway_evaluation_queue_depth", "gauge", ()),
    ("gateway_evaluation_reclaimed_total", "counter", ()),
    ("gateway_evaluation_samples", "gauge", ("kind", "model", "reference", "route")),
    ("gateway_evaluation_saved_usd", "gauge", ("kind", "model", "reference", "route")),
    ("gateway_evaluation_spend_usd_total", "counter", ()),
]


def _with_one_series_each(metrics: GatewayMetrics) -> GatewayMetrics:
    """A labelled metric shows its label names only through a series: give each one."""
    for holder in (metrics, metrics.admin, metrics.evaluation):
        for metric in vars(holder).values():
            if isinstance(metric, MetricWrapperBase) and metric._labelnames:
                metric.labels(*["x"] * len(metric._labelnames))
    return metrics


def _scraped_families(metrics: GatewayMetrics) -> list[tuple[str, str, tuple[str, ...]]]:
    body, _ = metrics.render()
    families = []
    for family in text_string_to_metric_families(body.decode()):
        if family.name.endswith("_created"):  # the parser's view of a counter's timestamp
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = sorted({label for s in family.samples for label in s.labels if label != "le"})
        families.append((name, family.type, tuple(labels)))
    return families


def test_the_exposition_has_exactly_the_documented_families_with_their_labels():
    metrics = _with_one_series_each(GatewayMetrics(CollectorRegistry()))

    assert sorted(_scraped_families(metrics)) == sorted(FAMILIES)


def test_every_family_has_a_help_text():
    body, _ = _with_one_series_each(GatewayMetrics(CollectorRegistry())).render()

    undocumented = [
        family.name
        for family in text_string_to_metric_families(body.decode())
        if not family.documentation.strip()
    ]
    assert undocumented == []
