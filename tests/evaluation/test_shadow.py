"""Which cheaper model a reference-served request measures in the shadow: the route's
models priced below the reference with the fewest samples on the kind, one picked by the
request id (stable, and spread over the candidates)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

from gateway.evaluation.shadow import pick, shadow_candidates
from gateway.routing.measured import MeasuredQuality

PRICES = {"big": Decimal(16), "mid": Decimal(4), "small": Decimal("0.8"), "pricier": Decimal(20)}
MODELS = ["small", "mid", "big", "pricier"]


def measured(model: str, samples: int, kind: str = "chat") -> MeasuredQuality:
    return MeasuredQuality("kept", model, kind, 1.0, 0.9, 1.1, samples)


def table(*rows: MeasuredQuality) -> dict[tuple[str, str, str], MeasuredQuality]:
    return {(m.route, m.model, m.kind): m for m in rows}


def test_with_nothing_measured_every_cheaper_model_is_a_candidate() -> None:
    assert shadow_candidates("kept", "chat", "big", MODELS, PRICES, {}) == ("small", "mid")


def test_the_least_measured_cheaper_models_on_the_kind_are_the_candidates() -> None:
    counts = table(measured("small", 12), measured("mid", 3), measured("small", 0, kind="code"))
    assert shadow_candidates("kept", "chat", "big", MODELS, PRICES, counts) == ("mid",)
    # another kind's measurement does not count for this one
    assert shadow_candidates("kept", "code", "big", MODELS, PRICES, counts) == ("small", "mid")
    # another route's neither
    other = {("other", "small", "chat"): measured("small", 50)}
    assert shadow_candidates("kept", "chat", "big", MODELS, PRICES, other) == ("small", "mid")


def test_a_route_with_nothing_cheaper_than_its_reference_has_no_candidate() -> None:
    assert shadow_candidates("kept", "chat", "small", MODELS, PRICES, {}) == ()
    assert shadow_candidates("kept", "chat", "big", ["big"], PRICES, {}) == ()


def test_the_request_id_picks_one_candidate_stably_and_spreads_over_all() -> None:
    candidates = ("small", "mid", "tiny")
    assert pick(candidates, "req-1") == pick(candidates, "req-1")
    spread = Counter(pick(candidates, f"req-{n}") for n in range(600))
    assert set(spread) == set(candidates)
    assert min(spread.values()) > 150
