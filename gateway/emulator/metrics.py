"""`/metrics` under SGLang's names, or vLLM's with `--metrics-style vllm`.

Names checked against sgl-project/sglang `python/sglang/srt/metrics/collector.py` and
vLLM V1's `vllm/v1/metrics/loggers.py` (which keeps the V0 `gpu_cache_usage_perc`
gauge's successor `kv_cache_usage_perc`; both are exported here so old and new
scrapers work). Every series carries `model_name`, vLLM's also `engine="0"`.
Latencies are in emulated GPU seconds (wall seconds / time_scale).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.emulator.options import MetricsStyle
from gateway.emulator.scheduler import Scheduler
from gateway.emulator.stats import Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EmulatorCollector(Collector):
    def __init__(
        self,
        scheduler: Scheduler,
        model: str,
        style: MetricsStyle,
        running_override: Callable[[], int] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._model = model
        self._style = style
        self._running_override = running_override

    def collect(self) -> Iterator[Metric]:
        if self._style == "vllm":
            yield from self._vllm()
        else:
            yield from self._sglang()

    def _running(self) -> int:
        if self._running_override is not None:
            return self._running_override()
        return len(self._scheduler.running)

    def _sglang(self) -> Iterator[Metric]:
        s = self._scheduler
        stats = s.stats
        names = ["model_name"]
        values = [self._model]
        gauges = (
            ("num_running_reqs", "The number of running requests.", self._running()),
            ("num_queue_reqs", "The number of requests in the waiting queue.", s.num_waiting),
            ("num_used_tokens", "The number of used tokens.", s.used_tokens),
            ("token_usage", "The token usage.", s.token_usage),
            ("cache_hit_rate", "The prefix cache hit rate.", stats.recent_cache_hit_rate()),
            ("gen_throughput", "The generation throughput (token/s).", stats.gen_throughput()),
            (
                "max_total_num_tokens",
                "Maximum total number of tokens in the KV cache pool.",
                s.config.kv_cache_tokens,
            ),
        )
        for name, help_text, value in gauges:
            yield _gauge(f"sglang:{name}", help_text, names, values, value)
        counters = (
            ("prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens_total),
            (
                "generation_tokens",
                "Number of generation tokens processed.",
                stats.generation_tokens_total,
            ),
            ("cached_tokens", "Number of cached prompt tokens.", stats.cache_hit_tokens_total),
            ("num_requests", "Number of requests processed.", stats.requests_total),
            (
                "num_retracted_requests",
                "Total number of retracted requests.",
                stats.preemptions_total,
            ),
        )
        for name, help_text, value in counters:
            yield _counter(f"sglang:{name}", help_text, names, values, value)
        histograms = (
            (
                "time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                stats.ttft,
            ),
            (
                "inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                stats.inter_token,
            ),
            (
                "e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                stats.e2e,
            ),
        )
        for name, help_text, histogram in histograms:
            yield _histogram(f"sglang:{name}", help_text, names, values, histogram)

    def _vllm(self) -> Iterator[Metric]:
        s = self._scheduler
        stats = s.stats
        names = ["engine", "model_name"]
        values = ["0", self._model]
        gauges = (
            (
                "num_requests_running",
                "Number of requests in model execution batches.",
                self._running(),
            ),
            ("num_requests_waiting", "Number of requests waiting to be processed.", s.num_waiting),
            ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.token_usage),
            (
                "gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.",
                s.token_usage,
            ),
        )
        for name, help_text, value in gauges:
            yield _gauge(f"vllm:{name}", help_text, names, values, value)
        counters = (
            (
                "prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                stats.cache_queried_tokens_total,
            ),
            (
                "prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                stats.cache_hit_tokens_total,
            ),
            (
                "num_preemptions",
                "Cumulative number of preemption from the engine.",
                stats.preemptions_total,
            ),
            ("prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens_total),
            (
                "generation_tokens",
                "Number of generation tokens processed.",
                stats.generation_tokens_total,
            ),
        )
        for name, help_text, value in counters:
            yield _counter(f"vllm:{name}", help_text, names, values, value)
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, count in sorted(stats.finished_by_reason.items()):
            success.add_metric([*values, reason], count)
        yield success
        histograms = (
            (
                "time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                stats.ttft,
            ),
            (
                "inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                stats.inter_token,
            ),
            (
                "e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                stats.e2e,
            ),
        )
        for name, help_text, histogram in histograms:
            yield _histogram(f"vllm:{name}", help_text, names, values, histogram)


def _gauge(
    name: str, help_text: str, names: list[str], values: list[str], value: float
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=names)
    family.add_metric(values, value)
    return family


def _counter(
    name: str, help_text: str, names: list[str], values: list[str], value: float
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=names)
    family.add_metric(values, value)
    return family


def _histogram(
    name: str, help_text: str, names: list[str], values: list[str], histogram: Histogram
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, help_text, labels=names)
    buckets = [(_le(bound), float(count)) for bound, count in histogram.cumulative()]
    family.add_metric(values, buckets, histogram.sum)
    return family


def _le(bound: float) -> str:
    """Prometheus' spelling of a bucket bound: `+Inf`, `0.1`, `1.0`."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


class MetricsPage:
    """Renders one emulator's metrics; one registry per app, nothing global."""

    def __init__(self, collector: EmulatorCollector) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self._registry)
