"""What recent traffic says, for the planner: TTFT per deployment (an EWMA), the
median output length per route, and the quality measured per route x served model x
request kind. Fed by settle (and, for quality, by whatever refreshes the evaluation
room's measurements: `set_measured_quality`), read by plan as an immutable snapshot that
is rebuilt at most once per `refresh_seconds`, so the hot path copies nothing."""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

from gateway.routing.measured import MeasuredQuality
from gateway.routing.state import LiveStats

# weight of the newest TTFT sample: about the last ten requests dominate
TTFT_ALPHA = 0.2
OUTPUT_WINDOW = 256


class LiveStatsTracker:
    def __init__(
        self, refresh_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttft_ms: dict[str, float] = {}
        self._outputs: dict[str, deque[int]] = {}
        self._refresh = refresh_seconds
        self._clock = clock
        self._measured: dict[tuple[str, str, str], MeasuredQuality] = {}
        self._snapshot = LiveStats()
        self._built_at = float("-inf")
        self._dirty = False

    def observe(
        self, deployment_id: str, route: str, ttft_seconds: float | None, output_tokens: int
    ) -> None:
        if ttft_seconds is not None:
            sample = ttft_seconds * 1000
            previous = self._ttft_ms.get(deployment_id)
            self._ttft_ms[deployment_id] = (
                sample if previous is None else previous + TTFT_ALPHA * (sample - previous)
            )
        if output_tokens > 0:
            window = self._outputs.get(route)
            if window is None:
                window = self._outputs[route] = deque(maxlen=OUTPUT_WINDOW)
            window.append(output_tokens)
        self._dirty = True

    def set_measured_quality(self, measured: list[MeasuredQuality]) -> None:
        """The evaluation room's latest measurements replace the previous ones (a model,
        kind or route missing from `measured` is unmeasured from the next snapshot)."""
        self._measured = {(m.route, m.model, m.kind): m for m in measured}
        self._dirty = True

    def snapshot(self) -> LiveStats:
        now = self._clock()
        if self._dirty and now - self._built_at >= self._refresh:
            self._snapshot = LiveStats(
                ttft_ewma_ms=dict(self._ttft_ms),
                median_output_tokens={
                    route: int(statistics.median(window))
                    for route, window in self._outputs.items()
                    if window
                },
                measured_quality=self._measured,
            )
            self._built_at = now
            self._dirty = False
        return self._snapshot
