"""The planner's live inputs: measured quality handed in replaces the previous table and
reaches the next snapshot (at most once per refresh), keyed by route, model and kind."""

from __future__ import annotations

from gateway.pipeline.live_stats import LiveStatsTracker
from gateway.routing.measured import MeasuredQuality


def test_measured_quality_reaches_the_next_snapshot_and_replaces_the_last() -> None:
    now = [0.0]
    tracker = LiveStatsTracker(refresh_seconds=1.0, clock=lambda: now[0])
    code = MeasuredQuality("auto", "small", "code", 0.98, 0.96, 0.99, 120)
    chat = MeasuredQuality("auto", "small", "chat", 0.9, 0.85, 0.94, 80)
    tracker.set_measured_quality([code, chat])
    first = tracker.snapshot()
    assert first.measured_quality == {("auto", "small", "code"): code,
                                      ("auto", "small", "chat"): chat}  # fmt: skip
    tracker.set_measured_quality([code])
    assert tracker.snapshot() is first  # within the refresh interval: the same snapshot
    now[0] = 1.5
    assert dict(tracker.snapshot().measured_quality) == {("auto", "small", "code"): code}
