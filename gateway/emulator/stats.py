"""Counters and latency histograms the emulator keeps, with no Prometheus in sight.

The scheduler fills them in emulated GPU seconds; `metrics.py` renders them under SGLang's
or vLLM's names.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

# SGLang's bucket bounds (python/sglang/srt/metrics/collector.py, TokenizerMetricsCollector)
# fmt: off
TTFT_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
    200.0, 400.0,
)
ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)
E2E_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
    200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0,
)
# fmt: on

# SGLang logs decode throughput every 40 decode steps (decode_log_interval)
THROUGHPUT_WINDOW_STEPS = 40
# cache hit rate over the most recent admissions, like SGLang's per-batch log value
HIT_RATE_WINDOW_ADMISSIONS = 256


class Histogram:
    """Cumulative-bucket histogram in the Prometheus sense."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs ending with +Inf."""
        pairs: list[tuple[float, int]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            pairs.append((bound, running))
        pairs.append((float("inf"), self.count))
        return pairs


@dataclass(slots=True)
class ServingStats:
    requests_total: int = 0
    finished_by_reason: dict[str, int] = field(default_factory=dict)
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    cache_queried_tokens_total: int = 0
    cache_hit_tokens_total: int = 0
    preemptions_total: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    inter_token: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    _recent_steps: deque[tuple[int, float]] = field(
        default_factory=lambda: deque(maxlen=THROUGHPUT_WINDOW_STEPS)
    )
    _recent_admissions: deque[tuple[int, int]] = field(
        default_factory=lambda: deque(maxlen=HIT_RATE_WINDOW_ADMISSIONS)
    )

    def record_step(self, decode_tokens: int, seconds: float) -> None:
        if decode_tokens:
            self._recent_steps.append((decode_tokens, seconds))

    def record_admission(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.cache_queried_tokens_total += prompt_tokens
        self.cache_hit_tokens_total += cached_tokens
        self._recent_admissions.append((prompt_tokens, cached_tokens))

    def record_finish(self, reason: str) -> None:
        self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1

    def gen_throughput(self) -> float:
        """Decode tokens per emulated second over the last decode steps."""
        tokens = sum(t for t, _ in self._recent_steps)
        seconds = sum(s for _, s in self._recent_steps)
        return tokens / seconds if seconds > 0 else 0.0

    def recent_cache_hit_rate(self) -> float:
        queried = sum(q for q, _ in self._recent_admissions)
        hit = sum(h for _, h in self._recent_admissions)
        return hit / queried if queried else 0.0
