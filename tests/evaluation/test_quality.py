"""Measured quality from labels: the ratio of means and its delta-method interval, the
groups (route x model x kind, and the wholes), savings, and the console's headline."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import msgspec

from gateway.evaluation.labels import JUDGED, Label
from gateway.evaluation.quality import headline, quality_rows, ratio_interval
from gateway.routing.measured import ALL_KINDS


def judged(served: float, *, model: str = "small", kind: str = "chat", rate: float = 1.0) -> Label:
    return Label(
        request_id=f"r{random.random()}",
        metric=JUDGED,
        source="judge",
        tenant="acme",
        route="auto",
        served_model=model,
        kind=kind,
        time=0.0,
        served_quality=served,
        reference_quality=1 - served,
        reference_model="big",
        served_cost_usd="0.001",
        reference_cost_usd="0.010",
        evaluation_cost_usd="0.012",
        sample_rate=rate,
    )


def test_the_ratio_is_the_ratio_of_means_and_its_interval_holds_it() -> None:
    served = [1.0, 0.5, 0.0, 0.5, 1.0, 0.25]
    reference = [1 - s for s in served]
    ratio, low, high = ratio_interval(served, reference)
    assert math.isclose(ratio, sum(served) / sum(reference))
    assert low < ratio < high


def test_the_interval_narrows_with_more_labels_and_covers_the_truth() -> None:
    draws = random.Random(7)
    # served answers win 40% of verdicts: the true ratio is 0.4 / 0.6
    truth = 0.4 / 0.6
    widths = []
    covered = 0
    for n in (30, 300, 3000):
        served = [1.0 if draws.random() < 0.4 else 0.0 for _ in range(n)]
        _, low, high = ratio_interval(served, [1 - s for s in served])
        widths.append(high - low)
        covered += low <= truth <= high
    assert widths[0] > widths[1] > widths[2]
    assert covered >= 2
    many = 0
    for _ in range(200):
        served = [1.0 if draws.random() < 0.4 else 0.0 for _ in range(200)]
        _, low, high = ratio_interval(served, [1 - s for s in served])
        many += low <= truth <= high
    # a 95% interval: about 190 of 200 (binomial spread allowed)
    assert 180 <= many <= 199


def test_too_few_labels_leave_the_interval_open() -> None:
    assert ratio_interval([], []) == (ratio_interval([], [])[0], 0.0, math.inf)
    assert ratio_interval([0.5], [0.5]) == (1.0, 0.0, math.inf)
    # the reference never won: the ratio has no finite value
    assert ratio_interval([1.0, 1.0], [0.0, 0.0])[0] == math.inf


def test_rows_group_per_model_and_kind_with_the_wholes_and_savings() -> None:
    labels = [judged(0.5), judged(0.5, kind="code"), judged(0.0, model="tiny", rate=0.5)]
    rows = {(r.quality.model, r.quality.kind): r for r in quality_rows(labels)}
    assert set(rows) == {
        ("small", "chat"),
        ("small", "code"),
        ("small", ALL_KINDS),
        ("tiny", "chat"),
        ("tiny", ALL_KINDS),
        (ALL_KINDS, ALL_KINDS),
    }
    whole = rows[ALL_KINDS, ALL_KINDS]
    assert whole.quality.samples == 3
    assert math.isclose(whole.quality.ratio, 1.0 / 2.0)
    # saved per label: 0.010 - 0.001; the label sampled at half rate stands for two requests
    assert str(whole.saved_usd) == "0.036"
    assert str(whole.evaluation_usd) == "0.036"
    assert rows["small", ALL_KINDS].quality.ratio == 1.0


def test_the_headline_says_unmeasured_without_labels() -> None:
    assert headline(None, "big").startswith("unmeasured")
    row = next(r for r in quality_rows([judged(0.5), judged(0.5)]) if r.quality.model == ALL_KINDS)
    text = headline(row, "big")
    assert text.startswith("saved $0.0180 against always-big at measured quality 100% [")


def test_a_shadow_label_measures_its_candidate_and_the_headline_keeps_what_the_client_got() -> None:
    shadow = [
        msgspec.structs.replace(judged(0.25), shadow=True, served_model="small") for _ in range(4)
    ]
    served = [judged(0.5) for _ in range(2)]
    rows = {(r.quality.model, r.quality.kind): r for r in quality_rows([*shadow, *served])}
    small = rows["small", "chat"]
    # the candidate's quality counts the same from shadow and served labels
    assert small.quality.samples == 6
    assert math.isclose(small.quality.ratio, (4 * 0.25 + 2 * 0.5) / (4 * 0.75 + 2 * 0.5))
    # the client of a shadow label got the reference's answer: nothing saved on it
    assert small.saved_usd == 2 * (Decimal("0.010") - Decimal("0.001"))
    whole = rows[ALL_KINDS, ALL_KINDS]
    # in the route's headline a shadow label is the reference's tie with itself
    assert math.isclose(whole.quality.ratio, (4 * 0.5 + 2 * 0.5) / (4 * 0.5 + 2 * 0.5))
    assert whole.saved_usd == small.saved_usd
