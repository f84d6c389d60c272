"""Threshold maths: from held-out scores and outcomes to the curve and a threshold.

A request goes to the strong tier when its score is at or above the threshold, so on a
set of scored prompts a threshold fixes the share of strong calls and the quality the
mix reaches. Quality is averaged per benchmark first, then across benchmarks, so 72
MT-Bench prompts count as much as 14,000 MMLU ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Scored:
    benchmark: str
    score: float
    strong: float
    weak: float


@dataclass(frozen=True)
class CurvePoint:
    threshold: float
    strong_share: float
    # mean quality of the routed mix, and as a fraction of always-strong's
    quality: float
    of_strong: float
    # share of the strong-weak quality gap recovered (PGR)
    gap_recovered: float


def share_at(scores: Sequence[float], threshold: float) -> float:
    """The share of these prompts that go to the strong tier at `threshold`."""
    if not scores:
        return 0.0
    return sum(1 for s in scores if s >= threshold) / len(scores)


def threshold_for_share(scores: Sequence[float], share: float) -> float:
    """A threshold sending `share` (0-1) of these prompts to the strong tier: the
    midpoint between the k-th and (k+1)-th highest scores, k = round(share * n), so
    small score noise does not move the share. Ties at the boundary all go one way, and
    a score of exactly 1.0 always goes to the strong tier (thresholds stop at 1)."""
    if not scores:
        raise ValueError("no scores to calibrate on")
    if not 0 <= share <= 1:
        raise ValueError(f"a share of strong calls is between 0 and 1, got {share}")
    ranked = sorted(scores, reverse=True)
    k = round(share * len(ranked))
    if k == 0:
        return (
            max((ranked[0] + 1.0) / 2, math.nextafter(ranked[0], math.inf))
            if ranked[0] < 1
            else 1.0
        )
    if k == len(ranked):
        return ranked[-1] / 2
    # above the k-th score even when the two are adjacent floats
    return max((ranked[k - 1] + ranked[k]) / 2, math.nextafter(ranked[k], math.inf))


def point_at(rows: Sequence[Scored], threshold: float) -> CurvePoint:
    benchmarks = sorted({r.benchmark for r in rows})
    routed, strong, weak = 0.0, 0.0, 0.0
    for name in benchmarks:
        mine = [r for r in rows if r.benchmark == name]
        routed += sum(r.strong if r.score >= threshold else r.weak for r in mine) / len(mine)
        strong += sum(r.strong for r in mine) / len(mine)
        weak += sum(r.weak for r in mine) / len(mine)
    count = len(benchmarks)
    routed, strong, weak = routed / count, strong / count, weak / count
    gap = strong - weak
    return CurvePoint(
        threshold=threshold,
        strong_share=share_at([r.score for r in rows], threshold),
        quality=routed,
        of_strong=routed / strong if strong else 1.0,
        gap_recovered=(routed - weak) / gap if gap else 1.0,
    )


def curve(rows: Sequence[Scored], steps: int = 10) -> list[CurvePoint]:
    """The trade-off at shares 0, 1/steps, ..., 1 of strong calls."""
    scores = [r.score for r in rows]
    return [point_at(rows, threshold_for_share(scores, i / steps)) for i in range(steps + 1)]


def threshold_for_quality(rows: Sequence[Scored], of_strong: float) -> CurvePoint:
    """The fewest strong calls whose mix reaches `of_strong` (e.g. 0.95) of always-strong
    quality; always-strong itself when nothing less does. One pass down the ranking,
    keeping each benchmark's routed quality as the strong set grows."""
    if not rows:
        raise ValueError("no scores to calibrate on")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.benchmark] = counts.get(r.benchmark, 0) + 1
    strong = sum(r.strong / counts[r.benchmark] for r in rows) / len(counts)
    routed = sum(r.weak / counts[r.benchmark] for r in rows) / len(counts)
    ranked = sorted(rows, key=lambda r: r.score, reverse=True)
    scores = [r.score for r in rows]
    for k in range(len(ranked) + 1):
        if routed >= of_strong * strong - 1e-12:
            point = point_at(rows, threshold_for_share(scores, k / len(rows)))
            if point.of_strong >= of_strong - 1e-12:
                return point
        if k < len(ranked):
            r = ranked[k]
            routed += (r.strong - r.weak) / counts[r.benchmark] / len(counts)
    return point_at(rows, threshold_for_share(scores, 1.0))
