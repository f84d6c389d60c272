"""The threshold that keeps a quality target at the lower bound of its bootstrap
interval: pure, the fewest reference calls that do it, and fewer as labels grow."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.training import fitting


def labels(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A score that tells, with noise, where the reference does better."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.4
    strong = np.where(hard, rng.choice([1.0, 0.8], n), rng.choice([1.0, 0.6], n))
    weak = np.where(hard, rng.choice([0.0, 0.3], n), rng.choice([1.0, 0.5], n))
    scores = np.clip(hard * 0.6 + rng.normal(0.2, 0.2, n), 0, 1)
    return scores, strong, weak


def test_the_chosen_cut_keeps_the_target_at_the_lower_bound_and_no_smaller_cut_does() -> None:
    scores, strong, weak = labels(300)
    chosen = fitting.threshold_for_target(scores, strong, weak, 0.95)
    curve = fitting.ratio_curve(scores, strong, weak)
    k = round(chosen.strong_share * 300)
    assert chosen.low >= 0.95 and curve.low[k] == pytest.approx(chosen.low)
    assert all(curve.low[c] < 0.95 for c in curve.cuts if c < k)
    # the threshold sends exactly that share to the reference
    assert np.mean(scores >= chosen.threshold) == pytest.approx(chosen.strong_share)
    # the point ratio sits inside its interval, and above the lower bound
    assert chosen.low <= chosen.ratio <= chosen.high
    # pure: the same inputs, the same answer
    assert fitting.threshold_for_target(scores, strong, weak, 0.95) == chosen


def test_more_labels_narrow_the_interval_and_need_fewer_reference_calls() -> None:
    few = fitting.threshold_for_target(*labels(40), 0.95)
    many = fitting.threshold_for_target(*labels(800), 0.95)
    assert many.strong_share < few.strong_share
    assert many.high - many.low < few.high - few.low


def test_a_target_of_one_or_a_useless_score_sends_everything_it_must() -> None:
    scores, strong, weak = labels(200)
    assert fitting.threshold_for_target(scores, strong, weak, 1.0).strong_share == 1.0
    flat = fitting.threshold_for_target(np.zeros(200), strong, weak, 0.95)
    # tied scores go one way: all to the reference or none
    assert flat.strong_share in (0.0, 1.0)
