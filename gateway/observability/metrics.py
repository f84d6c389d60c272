"""Every `gateway_*` Prometheus metric, and the typed methods the request pipeline calls.

One :class:`GatewayMetrics` per process. Metrics live on the registry it is given; with
several worker processes (prometheus-client's multiprocess mode, chosen by setting
`PROMETHEUS_MULTIPROC_DIR` before the process starts) each worker writes its own files and
:meth:`GatewayMetrics.render` merges them, so counters from all workers add up in one
exposition.

Label values must come from configuration (route, model, provider, deployment and replica
names), never from a request: a per-label-set child cache caps each metric at
`max_series_per_metric` series and folds the excess into `OVERFLOW`, so a bug that passes a
request-derived value degrades one metric instead of the Prometheus server.

Token kinds follow `gateway.usage.Usage`: `input` counts every prompt token (cached and
cache-write ones too), `output` counts every generated token (reasoning ones too); `cached`,
`cache_write` and `reasoning` are the parts, so never add them to their totals.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from gateway.observability.admin_metrics import AdminMetrics
from gateway.observability.evaluation_metrics import EvaluationMetrics
from gateway.observability.multiprocess_values import BufferedValues, install
from gateway.usage import Usage

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# the tenant label's value when tenant labels are disabled
ALL_TENANTS = "(all)"
# the label value a metric's excess label sets are folded into
OVERFLOW = "(overflow)"
NONE = "none"

# why the HTTP server closed a client connection (gateway/api/server_limits.py)
CONNECTION_CLOSE_REASONS = (
    "idle_timeout",
    "header_timeout",
    "body_timeout",
    "body_deadline",
    "too_many_connections",
    "headers_too_large",
    "bad_request",
)

CircuitState = Literal["closed", "half_open", "open"]
CIRCUIT_STATE_VALUES: Mapping[str, float] = {"closed": 0.0, "half_open": 1.0, "open": 2.0}

# Buckets in seconds (or tokens), chosen for LLM traffic: requests take seconds to minutes,
# the first token arrives in tens of milliseconds to seconds, the gateway's own work
# should take well under a millisecond.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60)
INTER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1)
# fine below a millisecond, where a lean proxy's own time lives
OVERHEAD_BUCKETS = (
    0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075,
    0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
)  # fmt: skip
REDIS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
TOKEN_LENGTH_BUCKETS = tuple(float(2**n) for n in range(4, 19))  # 16 .. 262144

Child = TypeVar("Child")


class _Series(Generic[Child]):
    """The children of one labelled metric, cached by label values.

    `.labels()` costs a lock and a dict lookup inside prometheus-client; this cache makes the
    hot path one dict lookup. Past `limit` label sets, new ones share one overflow child.
    What is cached per label set is `handle(child)`: the child itself, or the one bound
    method that records on it (:func:`_add`, :func:`_observer`).
    """

    __slots__ = ("_children", "_handle", "_labels", "_limit", "_overflow", "_width")

    def __init__(
        self,
        labels: Callable[..., Any],
        width: int,
        limit: int,
        handle: Callable[[Any], Child],
    ) -> None:
        self._labels = labels
        self._width = width
        self._limit = limit
        self._handle = handle
        self._children: dict[tuple[str, ...], Child] = {}
        self._overflow: Child | None = None

    def get(self, *label_values: str) -> Child:
        child = self._children.get(label_values)
        if child is not None:
            return child
        if len(self._children) >= self._limit:
            if self._overflow is None:
                self._overflow = self._handle(self._labels(*([OVERFLOW] * self._width)))
            return self._overflow
        child = self._children[label_values] = self._handle(self._labels(*label_values))
        return child


# Recording straight on a child's value objects: prometheus-client's `Counter.inc`,
# `Gauge.inc` and `Histogram.observe` check on every call what holds for every child (it
# has label values; no exemplar), and `observe` walks the buckets one by one. These write
# the same values, through the same value class (a lock, or the worker's mmap file), so
# the exposition is the same; tests/observability/test_metrics_fast_path.py compares them.
Add = Callable[[float], None]


def _add(child: Counter | Gauge) -> Add:
    """`child.inc(amount)` for an amount known to be >= 0 (counters), or any (gauges)."""
    return child._value.inc  # type: ignore[no-any-return]


def _observer(child: Histogram) -> Add:
    """`child.observe(amount)`: the sum, and the first bucket whose bound is >= amount."""
    add_sum = child._sum.inc
    buckets = tuple(bucket.inc for bucket in child._buckets)
    bounds = tuple(child._upper_bounds)

    def observe(amount: float) -> None:
        add_sum(amount)
        if amount == amount:  # NaN is <= no bound: it lands in no bucket
            buckets[bisect_left(bounds, amount)](1)

    return observe


def _itself(child: Child) -> Child:
    return child


class _MetricFactory:
    """Makes metrics on one registry (None: the worker's multiprocess files) and the
    cached series the recording methods use, capped at `limit` label sets each."""

    __slots__ = ("_limit", "_registry")

    def __init__(self, registry: CollectorRegistry | None, limit: int) -> None:
        self._registry = registry
        self._limit = limit

    def counter(self, name: str, doc: str, labels: Sequence[str]) -> Counter:
        return Counter(name, doc, labels, registry=self._registry)

    def histogram(
        self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(name, doc, labels, registry=self._registry, buckets=buckets)

    def gauge(
        self,
        name: str,
        doc: str,
        labels: Sequence[str],
        mode: Literal["livesum", "livemax", "mostrecent", "livemostrecent"],
    ) -> Gauge:
        return Gauge(name, doc, labels, registry=self._registry, multiprocess_mode=mode)

    def adds(self, metric: Counter | Gauge, width: int) -> _Series[Add]:
        return _Series(metric.labels, width, self._limit, _add)

    def observers(self, metric: Histogram, width: int) -> _Series[Add]:
        return _Series(metric.labels, width, self._limit, _observer)

    def gauges(self, metric: Gauge, width: int) -> _Series[Gauge]:
        return _Series(metric.labels, width, self._limit, _itself)


class GatewayMetrics:
    """Every gateway metric, created on `registry` (or, in multiprocess mode, in the
    worker's files), with one recording method per event of the request pipeline."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        tenant_labels: bool = False,
        multiprocess_dir: str | None = None,
        max_series_per_metric: int = 2000,
    ) -> None:
        """`multiprocess_dir` must equal the `PROMETHEUS_MULTIPROC_DIR` the process started
        with (prometheus-client picks its storage when it is imported); use
        :meth:`from_environment` to follow the environment."""
        if multiprocess_dir is not None:
            _check_multiprocess(multiprocess_dir)
        self.tenant_labels = tenant_labels
        self.multiprocess_dir = multiprocess_dir
        self._limit = max_series_per_metric
        self._exposition = registry if registry is not None else CollectorRegistry()
        if multiprocess_dir is not None:
            # Multiprocess rules: metrics are registered nowhere (their values go to the
            # worker's mmap files) and a collector merges every worker's files per scrape.
            MultiProcessCollector(self._exposition, path=multiprocess_dir)  # type: ignore[no-untyped-call]
            # values written to the files in batches, not one write per update
            self._buffered: BufferedValues | None = install(multiprocess_dir)
            target: CollectorRegistry | None = None
        else:
            self._buffered = None
            target = self._exposition
        self._build(target)
        self._tenant_fractions: dict[str, float] = {}
        self._settled: dict[tuple[str, str | None, str | None, str, int, bool], _Settled] = {}

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        registry: CollectorRegistry | None = None,
        tenant_labels: bool = False,
    ) -> GatewayMetrics:
        """Multiprocess mode when `PROMETHEUS_MULTIPROC_DIR` is set, one registry otherwise."""
        env = os.environ if environ is None else environ
        directory = env.get(MULTIPROC_ENV) or None
        return cls(registry, tenant_labels=tenant_labels, multiprocess_dir=directory)

    # ------------------------------------------------------------------ construction

    def _build(self, registry: CollectorRegistry | None) -> None:
        """Every family, in the exposition's order: one method per family below."""
        make = _MetricFactory(registry, self._limit)
        self._build_traffic(make)
        self._build_tokens_and_spend(make)
        self._build_routing(make)
        self._build_resilience(make)
        self._build_limits_and_redis(make)
        self._build_server(make)
        self._build_ledger(make)
        self._build_cache(make)
        self._build_tracing(make)
        self._build_backends(make)
        # a new family: a `_build_<family>(make)` method, called here
        self.admin = AdminMetrics(registry)
        self.evaluation = EvaluationMetrics(registry)

    def _build_traffic(self, make: _MetricFactory) -> None:
        """Requests, in flight, durations, TTFT, inter-token latency, the gateway's own time."""
        self.requests_total = make.counter(
            "gateway_requests_total",
            "Finished requests by route, model, provider, status class and status code.",
            ("route", "model", "provider", "status_class", "code"),
        )
        self.requests_in_flight = make.gauge(
            "gateway_requests_in_flight",
            "Requests being served now, by route.",
            ("route",),
            "livesum",
        )
        self.request_duration = make.histogram(
            "gateway_request_duration_seconds",
            "Time from request received to last byte sent.",
            ("route", "model", "provider", "stream"),
            DURATION_BUCKETS,
        )
        self.upstream_duration = make.histogram(
            "gateway_upstream_duration_seconds",
            "Time spent waiting on the upstream, all attempts included.",
            ("provider",),
            DURATION_BUCKETS,
        )
        self.ttft = make.histogram(
            "gateway_time_to_first_token_seconds",
            "Time from request received to the first content token sent (streams).",
            ("model", "provider"),
            TTFT_BUCKETS,
        )
        self.inter_token = make.histogram(
            "gateway_inter_token_latency_seconds",
            "Time between consecutive streamed chunks.",
            ("model",),
            INTER_TOKEN_BUCKETS,
        )
        self.overhead_seconds = make.histogram(
            "gateway_overhead_seconds",
            "Gateway's own time per request: total duration minus upstream time.",
            (),
            OVERHEAD_BUCKETS,
        )
        self._requests = make.adds(self.requests_total, 5)
        self._in_flight = make.adds(self.requests_in_flight, 1)
        self._duration = make.observers(self.request_duration, 4)
        self._upstream = make.observers(self.upstream_duration, 1)
        self._ttft = make.observers(self.ttft, 2)
        self._inter_token = make.observers(self.inter_token, 1)
        self._overhead = _observer(self.overhead_seconds)

    def _build_tokens_and_spend(self, make: _MetricFactory) -> None:
        """Tokens, dollars, budget use and request sizes."""
        self.tokens_total = make.counter(
            "gateway_tokens_total",
            "Tokens by model, provider, tenant and kind. input includes cached and "
            "cache_write; output includes reasoning.",
            ("model", "provider", "tenant", "kind"),
        )
        self.spend_total = make.counter(
            "gateway_spend_usd_total",
            "Spend in US dollars by tenant, model and provider.",
            ("tenant", "model", "provider"),
        )
        self.budget_used_ratio = make.gauge(
            "gateway_budget_used_ratio",
            "Fraction of the tenant's budget used in its current period (highest tenant "
            "when tenant labels are disabled).",
            ("tenant",),
            "mostrecent",
        )
        self.input_tokens_per_request = make.histogram(
            "gateway_request_input_tokens",
            "Input tokens per request, by model.",
            ("model",),
            TOKEN_LENGTH_BUCKETS,
        )
        self.output_tokens_per_request = make.histogram(
            "gateway_request_output_tokens",
            "Output tokens per request, by model.",
            ("model",),
            TOKEN_LENGTH_BUCKETS,
        )
        self._tokens = make.adds(self.tokens_total, 4)
        self._spend = make.adds(self.spend_total, 3)
        self._budget = make.gauges(self.budget_used_ratio, 1)
        self._input_lengths = make.observers(self.input_tokens_per_request, 1)
        self._output_lengths = make.observers(self.output_tokens_per_request, 1)

    def _build_routing(self, make: _MetricFactory) -> None:
        """Routing decisions and fallbacks between candidates."""
        self.routing_decisions_total = make.counter(
            "gateway_routing_decisions_total",
            "Routing decisions by route and chosen model.",
            ("route", "model"),
        )
        self.fallbacks_total = make.counter(
            "gateway_fallbacks_total",
            "Fallbacks from a model to the next candidate, by reason.",
            ("route", "from_model", "reason"),
        )
        self.learned_fallbacks_total = make.counter(
            "gateway_learned_fallbacks_total",
            "Requests on a learned route planned without a score (saturated, unavailable, "
            "failed): the route's fallback strategy ordered them.",
            ("route", "reason"),
        )
        self._decisions = make.adds(self.routing_decisions_total, 2)
        self._fallbacks = make.adds(self.fallbacks_total, 3)
        self._learned_fallbacks = make.adds(self.learned_fallbacks_total, 2)
        self.route_quality_total = make.counter(
            "gateway_route_quality_total",
            "Requests on routes with a quality_target, by what the route could say of their "
            "quality: measured (kept by measurement), unmeasured (no measurement yet), "
            "below-target (the live ratio fell below the target: moving toward the "
            "reference), reference (the reference served).",
            ("route", "status"),
        )
        self._route_quality = make.adds(self.route_quality_total, 2)

    def _build_resilience(self, make: _MetricFactory) -> None:
        """Retries, breakers (panic, fail-fast, circuit state) and cooldowns."""
        self.retries_total = make.counter(
            "gateway_retries_total",
            "Retries of an upstream call, by provider and cause.",
            ("provider", "cause"),
        )
        self.breaker_panics_total = make.counter(
            "gateway_breaker_panics_total",
            "Requests sent to an ejected or cooling deployment because every candidate "
            "of their route was (panic mode), by route and deployment.",
            ("route", "deployment"),
        )
        self.breaker_fail_fast_total = make.counter(
            "gateway_breaker_fail_fast_total",
            "Requests refused with 503 because every candidate was ejected or cooling "
            "down (breaker.when_all_open: fail_fast), by route.",
            ("route",),
        )
        self.cooldowns_total = make.counter(
            "gateway_deployment_cooldowns_total",
            "Cooldowns a deployment entered after a 429 (its retry-after), by deployment.",
            ("deployment",),
        )
        self.circuit_state_gauge = make.gauge(
            "gateway_circuit_state",
            "Circuit breaker state per deployment: 0 closed, 1 half-open, 2 open "
            "(worst state across workers).",
            ("deployment",),
            "livemax",
        )
        self._retries = make.adds(self.retries_total, 2)
        self._panics = make.adds(self.breaker_panics_total, 2)
        self._fail_fast = make.adds(self.breaker_fail_fast_total, 1)
        self._cooldowns = make.adds(self.cooldowns_total, 1)
        self._circuits = make.gauges(self.circuit_state_gauge, 1)

    def _build_limits_and_redis(self, make: _MetricFactory) -> None:
        """Refusals by rate limits and budgets, and the Redis round trips behind them."""
        self.rate_limited_total = make.counter(
            "gateway_rate_limited_total",
            "Requests refused by a rate limit or budget, by scope and kind.",
            ("scope", "kind"),
        )
        self.redis_errors_total = make.counter(
            "gateway_redis_errors_total",
            "Failed Redis operations, by operation.",
            ("op",),
        )
        self.redis_latency_seconds = make.histogram(
            "gateway_redis_latency_seconds",
            "Redis round-trip time, by operation.",
            ("op",),
            REDIS_BUCKETS,
        )
        self.admission_grants_total = make.counter(
            "gateway_admission_grants_total",
            "Admissions made ahead (pipeline/admit.py): made, used by a request, or given"
            " back unused.",
            ("outcome",),
        )
        self._rate_limited = make.adds(self.rate_limited_total, 2)
        self._admission_grants = make.adds(self.admission_grants_total, 1)
        self._redis_errors = make.adds(self.redis_errors_total, 1)
        self._redis_latency = make.observers(self.redis_latency_seconds, 1)

    def _build_server(self, make: _MetricFactory) -> None:
        """The process: policy reloads and the connections its HTTP server closed."""
        self.policy_reloads_total = make.counter(
            "gateway_policy_reloads_total",
            "Policy reload attempts, by result (success or failure).",
            ("result",),
        )
        self.connections_closed_total = make.counter(
            "gateway_connections_closed_total",
            "Client connections the HTTP server closed or refused, by reason.",
            ("reason",),
        )
        for reason in CONNECTION_CLOSE_REASONS:  # a fixed set: every series from the start
            self.connections_closed_total.labels(reason)
        self._reloads = make.adds(self.policy_reloads_total, 1)

    def _build_ledger(self, make: _MetricFactory) -> None:
        """The spend ledger's queue and failed writes, and whether limits are enforced
        (both say how healthy the store is)."""
        self.ledger_queue = make.gauge(
            "gateway_ledger_queue_depth",
            "Spend ledger records waiting to be written to Redis.",
            (),
            "livesum",
        )
        self.limits_enforced_gauge = make.gauge(
            "gateway_limits_enforced",
            "1 while rate limits and budgets are enforced; 0 while the store is degraded "
            "under fail_open (requests served without limits). Set by /readyz probes.",
            (),
            "livemostrecent",
        )
        self.ledger_write_failures_total = make.counter(
            "gateway_ledger_write_failures_total",
            "Spend ledger writes that failed.",
            (),
        )

    def _build_cache(self, make: _MetricFactory) -> None:
        """The response cache (gateway/cache/, pipeline/response_cache.py)."""
        self.cache_lookups_total = make.counter(
            "gateway_cache_lookups_total",
            "Response cache lookups, by route and result: hit, miss, bypass (the client "
            "asked for none), error (the store did not answer: served as a miss).",
            ("route", "result"),
        )
        self.cache_writes_total = make.counter(
            "gateway_cache_writes_total",
            "Answers offered to the response cache, by route and result: stored, "
            "too_large (over max_entry_bytes), fallback (served by another model than "
            "planned), error.",
            ("route", "result"),
        )
        self.cache_bytes_total = make.counter(
            "gateway_cache_bytes_total",
            "Bytes of cached entries, by route and direction: read (hits served) and "
            "written (entries stored).",
            ("route", "direction"),
        )
        self.cache_saved_usd_total = make.counter(
            "gateway_cache_saved_usd_total",
            "What cache hits would have cost had the upstream served them, in US dollars, "
            "by tenant and model.",
            ("tenant", "model"),
        )
        self._cache_lookups = make.adds(self.cache_lookups_total, 2)
        self._cache_writes = make.adds(self.cache_writes_total, 2)
        self._cache_bytes = make.adds(self.cache_bytes_total, 2)
        self._cache_saved = make.adds(self.cache_saved_usd_total, 2)

    def _build_tracing(self, make: _MetricFactory) -> None:
        """Traces (OpenTelemetry, when on): what became of the spans the workers made."""
        self.trace_spans_exported_total = make.counter(
            "gateway_trace_spans_exported_total",
            "Spans the OTLP collector accepted.",
            (),
        )
        self.trace_spans_dropped_total = make.counter(
            "gateway_trace_spans_dropped_total",
            "Spans lost: the export queue was full, or their export failed.",
            (),
        )
        self.trace_export_failures_total = make.counter(
            "gateway_trace_export_failures_total",
            "OTLP export calls that failed (collector unreachable or refusing), after "
            "the exporter's own retries.",
            (),
        )

    def _build_backends(self, make: _MetricFactory) -> None:
        """GPU replicas, scraped from SGLang or vLLM: the same value in every worker."""
        self.backend_in_flight = make.gauge(
            "gateway_backend_in_flight_requests",
            "Requests running on a GPU replica, as the replica reports it.",
            ("replica",),
            "livemostrecent",
        )
        self.backend_queue_depth = make.gauge(
            "gateway_backend_queue_depth",
            "Requests waiting in a GPU replica's queue, as the replica reports it.",
            ("replica",),
            "livemostrecent",
        )
        self.backend_kv_cache_usage = make.gauge(
            "gateway_backend_kv_cache_usage_ratio",
            "Fraction of a GPU replica's KV cache in use.",
            ("replica",),
            "livemostrecent",
        )
        self.backend_prefix_cache_hit = make.gauge(
            "gateway_backend_prefix_cache_hit_ratio",
            "A GPU replica's prefix-cache hit rate.",
            ("replica",),
            "livemostrecent",
        )
        self._backend = (
            make.gauges(self.backend_in_flight, 1),
            make.gauges(self.backend_queue_depth, 1),
            make.gauges(self.backend_kv_cache_usage, 1),
            make.gauges(self.backend_prefix_cache_hit, 1),
        )

    # ------------------------------------------------------------------ traffic

    def request_started(self, route: str) -> None:
        self._in_flight.get(route)(1)

    def request_finished(
        self,
        route: str,
        model: str | None,
        provider: str | None,
        status_code: int,
        duration_s: float,
        ttft_s: float | None,
        upstream_s: float | None,
        stream: bool,
    ) -> None:
        """Close what :meth:`request_started` opened, with the same `route`. Records the
        request, its duration, TTFT, upstream time and the gateway overhead (duration minus
        upstream time; all of it when no upstream was called)."""
        model = model or NONE
        provider = provider or NONE
        self._in_flight.get(route)(-1)
        code = str(status_code)
        self._requests.get(route, model, provider, f"{code[0]}xx", code)(1)
        self._duration.get(route, model, provider, "true" if stream else "false")(duration_s)
        if ttft_s is not None:
            self._ttft.get(model, provider)(ttft_s)
        if upstream_s is not None:
            self._upstream.get(provider)(upstream_s)
            self.overhead(max(0.0, duration_s - upstream_s))
        else:
            self.overhead(duration_s)

    def inter_token_latency(self, model: str, seconds: float) -> None:
        self._inter_token.get(model)(seconds)

    def overhead(self, seconds: float) -> None:
        """Called by :meth:`request_finished`; call it directly only for work measured
        outside a request."""
        self._overhead(seconds)

    def request_settled(
        self,
        route: str,
        model: str | None,
        provider: str | None,
        tenant: str,
        status_code: int,
        stream: bool,
        in_flight: bool,
        duration_s: float,
        ttft_s: float | None,
        upstream_s: float | None,
        usage: Usage | None,
        cost: Decimal | None,
        fallbacks: Sequence[str],
        inter_token_s: float | None,
    ) -> None:
        """Everything one finished request records, in one call, on handles cached per
        label set: what :meth:`request_finished` records (when `in_flight`, i.e.
        :meth:`request_started` was called), and when an upstream served it (`model` and
        `provider` given) :meth:`routing_decision`, :meth:`fallback` per "model:reason" in
        `fallbacks`, :meth:`tokens`, :meth:`token_lengths`, :meth:`spend` and
        :meth:`inter_token_latency`. The same series and values as those calls."""
        key = (route, model, provider, tenant, status_code, stream)
        series = self._settled.get(key)
        if series is None:
            series = _Settled(self, *key)
            if len(self._settled) < self._limit:
                self._settled[key] = series
        if in_flight:
            in_flight_add, requests_add, duration_add = series.request or series.resolve_request()
            in_flight_add(-1)
            requests_add(1)
            duration_add(duration_s)
            if ttft_s is not None:
                (series.ttft or series.resolve_ttft())(ttft_s)
            if upstream_s is not None:
                (series.upstream or series.resolve_upstream())(upstream_s)
                self._overhead(max(0.0, duration_s - upstream_s))
            else:
                self._overhead(duration_s)
        if model is None or provider is None:
            return
        (series.decision or series.resolve_decision())(1)
        for fallback in fallbacks:
            from_model, _, reason = fallback.partition(":")
            self._fallbacks.get(route, from_model, reason)(1)
        if usage is not None:
            counts = (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.cache_write_tokens,
                usage.output_tokens,
                usage.reasoning_tokens,
            )
            tokens = series.tokens
            for kind, count in enumerate(counts):
                if count > 0:
                    (tokens[kind] or series.resolve_tokens(kind))(count)
            lengths = series.lengths or series.resolve_lengths()
            lengths[0](counts[0])
            lengths[1](counts[3])
        if cost is not None and cost > 0:
            (series.spend or series.resolve_spend())(float(cost))
        if inter_token_s is not None:
            (series.inter_token or series.resolve_inter_token())(inter_token_s)

    # ------------------------------------------------------------------ tokens and money

    def tokens(self, model: str, provider: str, tenant: str, usage: Usage) -> None:
        tenant = self._tenant(tenant)
        for kind, count in (
            ("input", usage.input_tokens),
            ("cached", usage.cached_input_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if count > 0:
                self._tokens.get(model, provider, tenant, kind)(count)

    def spend(self, tenant: str, model: str, provider: str, usd: Decimal) -> None:
        if usd > 0:
            self._spend.get(self._tenant(tenant), model, provider)(float(usd))

    def budget_used(self, tenant: str, fraction: float) -> None:
        if self.tenant_labels:
            self._budget.get(tenant).set(fraction)
            return
        self._tenant_fractions[tenant] = fraction
        self._budget.get(ALL_TENANTS).set(max(self._tenant_fractions.values()))

    def token_lengths(self, model: str, input: int, output: int) -> None:
        self._input_lengths.get(model)(input)
        self._output_lengths.get(model)(output)

    # ------------------------------------------------------------------ routing, resilience

    def routing_decision(self, route: str, model: str) -> None:
        self._decisions.get(route, model)(1)

    def fallback(self, route: str, from_model: str, reason: str) -> None:
        self._fallbacks.get(route, from_model, reason)(1)

    def learned_fallback(self, route: str, reason: str) -> None:
        self._learned_fallbacks.get(route, reason)(1)

    def route_quality(self, route: str, status: str) -> None:
        self._route_quality.get(route, status)(1)

    def retry(self, provider: str, cause: str) -> None:
        self._retries.get(provider, cause)(1)

    def circuit_state(self, deployment: str, state: CircuitState) -> None:
        self._circuits.get(deployment).set(CIRCUIT_STATE_VALUES[state])

    def breaker_panic(self, route: str, deployment: str) -> None:
        self._panics.get(route, deployment)(1)

    def breaker_fail_fast(self, route: str) -> None:
        self._fail_fast.get(route)(1)

    def cooldown(self, deployment: str) -> None:
        self._cooldowns.get(deployment)(1)

    def rate_limited(self, scope: str, kind: str) -> None:
        """`scope`: key, tenant, model, deployment...; `kind`: requests, tokens,
        concurrency, budget."""
        self._rate_limited.get(scope, kind)(1)

    def prime(self, redis_ops: Sequence[str] = ()) -> None:
        """Create the series of events that may not have happened yet, at zero, so rates
        and alerts over them evaluate (and dashboards show 0, not "no data")."""
        for op in redis_ops:
            self._redis_errors.get(op)
        self._reloads.get("success")
        self._reloads.get("failure")
        for outcome in ("made", "used", "returned"):
            self._admission_grants.get(outcome)
        self.limits_enforced_gauge.set(1)

    def admission_grant(self, outcome: str) -> None:
        """`outcome`: made, used, returned."""
        self._admission_grants.get(outcome)(1)

    def redis_error(self, op: str) -> None:
        self._redis_errors.get(op)(1)

    def redis_latency(self, op: str, seconds: float) -> None:
        self._redis_latency.get(op)(seconds)

    def cache_lookup(self, route: str, result: str) -> None:
        self._cache_lookups.get(route, result)(1)

    def cache_hit(self, route: str, tenant: str, model: str, size: int, saved: Decimal) -> None:
        self._cache_lookups.get(route, "hit")(1)
        self._cache_bytes.get(route, "read")(size)
        self._cache_saved.get(self._tenant(tenant), model)(float(saved))

    def cache_write(self, route: str, result: str, size: int = 0) -> None:
        self._cache_writes.get(route, result)(1)
        if size:
            self._cache_bytes.get(route, "written")(size)

    def policy_reload(self, ok: bool) -> None:
        self._reloads.get("success" if ok else "failure")(1)

    def connection_closed(self, reason: str) -> None:
        """`reason` is one of the server's fixed names (gateway/api/server_limits.py)."""
        self.connections_closed_total.labels(reason).inc()

    def ledger_queue_depth(self, n: int) -> None:
        self.ledger_queue.set(n)

    def ledger_write_failure(self) -> None:
        self.ledger_write_failures_total.inc()

    def trace_spans(self, exported: int, dropped: int, export_failures: int) -> None:
        """Counts since the last call (the exporter thread's, reported by the runtime)."""
        self.trace_spans_exported_total.inc(exported)
        self.trace_spans_dropped_total.inc(dropped)
        self.trace_export_failures_total.inc(export_failures)

    def limits_enforced(self, enforced: bool) -> None:
        self.limits_enforced_gauge.set(1 if enforced else 0)

    # ------------------------------------------------------------------ backends

    def backend(
        self,
        replica: str,
        in_flight: float | None,
        queue_depth: float | None,
        kv_usage: float | None,
        cache_hit_rate: float | None,
    ) -> None:
        """One scrape of a GPU replica; a value the server does not report stays unset."""
        for metric, value in zip(
            self._backend, (in_flight, queue_depth, kv_usage, cache_hit_rate), strict=True
        ):
            if value is not None:
                metric.get(replica).set(value)

    # ------------------------------------------------------------------ exposition

    def render(self) -> tuple[bytes, str]:
        """The exposition body (every worker's values in multiprocess mode) and its
        content type."""
        self.flush()
        return generate_latest(self._exposition), CONTENT_TYPE_PLAIN_0_0_4

    def flush(self) -> None:
        """Multiprocess mode: write this worker's updated values to its files now (before
        a scrape, and when the worker stops); they are otherwise written every
        `multiprocess_values.FLUSH_SECONDS`."""
        if self._buffered is not None:
            self._buffered.flush()

    def _tenant(self, tenant: str) -> str:
        return tenant if self.tenant_labels else ALL_TENANTS


TOKEN_KINDS = ("input", "cached", "cache_write", "output", "reasoning")


class _Settled:
    """The handles :meth:`GatewayMetrics.request_settled` records on for one label set
    (route, model, provider, tenant, status code, stream). Those of events a request may
    not have (a TTFT, spend, a token kind) resolve on first use: a child is created, and
    so exported, when the per-metric call would have created it, not before."""

    __slots__ = (
        "_code",
        "_key",
        "_metrics",
        "_model",
        "_stream",
        "decision",
        "inter_token",
        "lengths",
        "request",
        "spend",
        "tokens",
        "ttft",
        "upstream",
    )

    def __init__(
        self,
        metrics: GatewayMetrics,
        route: str,
        model: str | None,
        provider: str | None,
        tenant: str,
        status_code: int,
        stream: bool,
    ) -> None:
        self._metrics = metrics
        # the request's own series say "none" for no model or provider; the others are
        # recorded only when both are given
        self._key = (route, model or NONE, provider or NONE, metrics._tenant(tenant))
        self._model = model or ""
        self._code = status_code
        self._stream = stream
        self.request: tuple[Add, Add, Add] | None = None
        self.ttft: Add | None = None
        self.upstream: Add | None = None
        self.decision: Add | None = None
        self.tokens: list[Add | None] = [None] * len(TOKEN_KINDS)
        self.lengths: tuple[Add, Add] | None = None
        self.spend: Add | None = None
        self.inter_token: Add | None = None

    def resolve_request(self) -> tuple[Add, Add, Add]:
        """In flight, requests and duration: the series of a request counted in flight."""
        route, model, provider, _ = self._key
        metrics = self._metrics
        code = str(self._code)
        self.request = (
            metrics._in_flight.get(route),
            metrics._requests.get(route, model, provider, f"{code[0]}xx", code),
            metrics._duration.get(route, model, provider, "true" if self._stream else "false"),
        )
        return self.request

    def resolve_ttft(self) -> Add:
        _, model, provider, _ = self._key
        self.ttft = self._metrics._ttft.get(model, provider)
        return self.ttft

    def resolve_upstream(self) -> Add:
        self.upstream = self._metrics._upstream.get(self._key[2])
        return self.upstream

    def resolve_decision(self) -> Add:
        self.decision = self._metrics._decisions.get(self._key[0], self._model)
        return self.decision

    def resolve_tokens(self, kind: int) -> Add:
        _, _, provider, tenant = self._key
        add = self._metrics._tokens.get(self._model, provider, tenant, TOKEN_KINDS[kind])
        self.tokens[kind] = add
        return add

    def resolve_lengths(self) -> tuple[Add, Add]:
        model = self._model
        metrics = self._metrics
        self.lengths = (metrics._input_lengths.get(model), metrics._output_lengths.get(model))
        return self.lengths

    def resolve_spend(self) -> Add:
        _, _, provider, tenant = self._key
        self.spend = self._metrics._spend.get(tenant, self._model, provider)
        return self.spend

    def resolve_inter_token(self) -> Add:
        self.inter_token = self._metrics._inter_token.get(self._model)
        return self.inter_token


def reset_multiprocess_dir(directory: str) -> None:
    """Empty (or create) `directory` for a fresh set of workers. Call it in the parent
    process before the workers start: a previous run's files would be merged into this
    run's counters."""
    os.makedirs(directory, exist_ok=True)
    for entry in os.scandir(directory):
        if entry.is_file() and entry.name.endswith(".db"):
            os.unlink(entry.path)


def forget_worker(directory: str, pid: int) -> None:
    """Take a worker that has stopped, however it stopped, out of the live gauges (in
    flight, circuit state, ledger queue, the replicas' last scraped load): prometheus-
    client's files of its pid for the `live*` modes. Its counters and histograms stay in
    the sums, as totals must."""
    mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def _check_multiprocess(directory: str) -> None:
    if not os.path.isdir(directory):
        raise ValueError(f"{MULTIPROC_ENV}={directory!r} is not a directory; create it first")
    if os.environ.get(MULTIPROC_ENV) != directory or not getattr(
        values.ValueClass, "_multiprocess", False
    ):
        raise ValueError(
            f"multiprocess metrics need {MULTIPROC_ENV}={directory!r} in the environment "
            "before prometheus_client is imported (set it before starting the process)"
        )
