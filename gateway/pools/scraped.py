"""What a replica's `/metrics` page says about its load, for SGLang, vLLM and llama.cpp.

Only four facts matter to the balancers: requests running, requests waiting in the
server's own queue, the fraction of the KV cache running requests hold, and (for the
bench and dashboards) the prefix-cache hit rate. Series with several label sets (data
parallel ranks, several models) are summed for counts and maxed for the cache usage,
since the fullest rank is the one that preempts first.

    fact          SGLang                      vLLM
    running       sglang:num_running_reqs     vllm:num_requests_running
    queued        sglang:num_queue_reqs       vllm:num_requests_waiting
    kv_usage      sglang:token_usage          vllm:kv_cache_usage_perc
                                              (vllm:gpu_cache_usage_perc before v0.10)
    hit rate      sglang:cache_hit_rate       vllm:prefix_cache_hits_total /
                                              vllm:prefix_cache_queries_total

    fact          llama.cpp (llama-server --metrics)
    running       llamacpp:requests_processing (slots busy)
    queued        llamacpp:requests_deferred (tasks waiting for a free slot)
    kv_usage      llamacpp:kv_cache_usage_ratio (older servers only)
    hit rate      llamacpp:prompt_tokens_cached_total /
                  (that + llamacpp:prompt_tokens_total, which excludes cached tokens)

llama-server's `/metrics` has no slot count and, in current versions, no KV-cache use:
those come from its `/slots` page (`gateway.pools.llamacpp_slots`), merged in by the
pool's monitor.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

MetricsStyle = Literal["sglang", "vllm", "llamacpp"]


@dataclass(frozen=True, slots=True)
class ScrapedLoad:
    running: int = 0
    queued: int = 0
    kv_usage: float = 0.0
    cache_hit_rate: float | None = None
    # how many requests the server runs at once, where it says so (llama.cpp's slots)
    slots: int | None = None


# fact -> the series that say it, preferred first
_Names = dict[str, tuple[str, ...]]

_SGLANG: _Names = {
    "running": ("sglang:num_running_reqs",),
    "queued": ("sglang:num_queue_reqs",),
    "kv_usage": ("sglang:token_usage",),
    "hit_rate": ("sglang:cache_hit_rate",),
}
_VLLM: _Names = {
    "running": ("vllm:num_requests_running",),
    "queued": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
}
_LLAMACPP: _Names = {
    "running": ("llamacpp:requests_processing",),
    "queued": ("llamacpp:requests_deferred",),
    "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
    "hit_rate": (),
}
_NAMES: dict[MetricsStyle, _Names] = {
    "sglang": _SGLANG,
    "vllm": _VLLM,
    "llamacpp": _LLAMACPP,
}


def parse_metrics(text: str, style: MetricsStyle) -> ScrapedLoad:
    """The load facts in a Prometheus text page; absent series read as zero.

    Raises ValueError when the page is not Prometheus text.
    """
    names = _NAMES[style]
    sums: dict[str, float] = defaultdict(float)
    maxima: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] += sample.value
            maxima[sample.name] = max(maxima.get(sample.name, sample.value), sample.value)
    return ScrapedLoad(
        running=int(_first(sums, names["running"]) or 0),
        queued=int(_first(sums, names["queued"]) or 0),
        kv_usage=_first(maxima, names["kv_usage"]) or 0.0,
        cache_hit_rate=_hit_rate(sums, maxima, names["hit_rate"], style),
    )


def _first(values: dict[str, float], candidates: tuple[str, ...]) -> float | None:
    for name in candidates:
        if name in values:
            return values[name]
    return None


def _hit_rate(
    sums: dict[str, float],
    maxima: dict[str, float],
    gauge_names: tuple[str, ...],
    style: MetricsStyle,
) -> float | None:
    if style == "vllm":
        queries = sums.get("vllm:prefix_cache_queries_total")
        if queries:
            return sums.get("vllm:prefix_cache_hits_total", 0.0) / queries
    if style == "llamacpp":
        cached = sums.get("llamacpp:prompt_tokens_cached_total", 0.0)
        computed = sums.get("llamacpp:prompt_tokens_total", 0.0)
        return cached / (cached + computed) if cached + computed else None
    return _first(maxima, gauge_names)
