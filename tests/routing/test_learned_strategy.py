"""The `learned` strategy: the score against the threshold picks the tier, the rest of
the policy (rules, floors, overrides, fallbacks) composes with it, and without a score
the route's fallback strategy orders the pool."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace
from pydantic import ValidationError

from gateway.routing.features import StrongScore
from gateway.routing.learned.weights import decode, encode, load_scorer
from gateway.settings.routes import RouteSettings
from tests.routing.learned_support import EASY, HARD, shipped_policy, shipped_scorer
from tests.routing.support import build_policy, features, models_of, overrides, run

TIERS: dict[str, Any] = {
    "strategy": "learned",
    "models": ["cheap", "mid", "wide", "premium"],
    "learned": {"strong": ["wide", "premium"], "cheap": ["cheap", "mid"], "threshold": 0.4},
}


def scored(value: float | None, problem: str | None = None, **fields: Any) -> Any:
    return features("tiers", strong_score=StrongScore("test", value, problem), **fields)


def test_a_score_at_or_above_the_threshold_puts_the_strong_tier_first_cheapest_leading() -> None:
    policy = build_policy(routes={"tiers": TIERS})
    strong = run(policy, scored(0.4))
    assert models_of(strong) == ["wide", "premium", "cheap", "mid"]
    assert strong.reason == "learned-strong-score-0.400-threshold-0.400"
    assert strong.learned_tier == "strong" and strong.learned_score == 0.4
    cheap = run(policy, scored(0.399))
    assert models_of(cheap) == ["cheap", "mid", "wide", "premium"]
    assert cheap.reason == "learned-cheap-score-0.399-threshold-0.400"
    assert "score 0.399 < threshold 0.400 -> cheap tier" in cheap.candidates[0].reason


def test_floors_and_rules_screen_the_tiers_before_the_score_orders_them() -> None:
    policy = build_policy(
        routes={"tiers": {**TIERS, "min_quality": 0.7}},
        rules=[
            {"name": "no-wide", "when": {"route": "tiers"}, "then": {"exclude_models": ["wide"]}}
        ],
    )
    strong = run(policy, scored(0.9))
    # `cheap` (0.6) is below the floor; the rule removed `wide`
    assert models_of(strong) == ["premium", "mid"]
    assert strong.rules == ("no-wide",)
    # a floor above the whole cheap tier: the strong tier serves a cheap score
    lifted = run(policy, scored(0.1, overrides=overrides(min_quality=0.9)))
    assert models_of(lifted) == ["premium"]


def test_without_a_score_the_fallback_strategy_orders_and_the_reason_says_why() -> None:
    policy = build_policy(routes={"tiers": {**TIERS, "min_quality": 0.8}})
    saturated = run(policy, scored(None, "saturated"))
    assert saturated.reason == "learned-saturated+cheapest-meeting-0.8"
    assert models_of(saturated) == ["mid", "wide", "premium"]
    assert saturated.learned_tier is None and saturated.learned_threshold == 0.4
    never = run(policy, features("tiers"))
    assert never.reason == "learned-not-scored+cheapest-meeting-0.8"
    quality_first = build_policy(
        routes={"tiers": {**TIERS, "learned": {**TIERS["learned"], "fallback_strategy": "quality"}}}
    )
    assert models_of(run(quality_first, scored(None, "unavailable")))[0] == "premium"


def test_fallbacks_follow_both_tiers() -> None:
    policy = build_policy(
        routes={
            "tiers": {
                **TIERS,
                "models": ["mid", "premium"],
                "fallbacks": ["cheap"],
                "learned": {**TIERS["learned"], "strong": ["premium"], "cheap": ["mid"]},
            }
        }
    )
    result = run(policy, scored(0.2))
    assert [(c.model, c.fallback) for c in result.candidates][:2] == [
        ("mid", False),
        ("premium", False),
    ]
    assert result.candidates[-1].model == "cheap" and result.candidates[-1].fallback


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ({"strategy": "learned", "models": ["mid"]}, "needs a `learned:` block"),
        ({**TIERS, "strategy": "cheapest"}, "needs `strategy: learned`"),
        ({**TIERS, "models": ["cheap", "mid"]}, "not in `models`: wide, premium"),
        ({**TIERS, "learned": {**TIERS["learned"], "cheap": ["premium"]}}, "both tiers: premium"),
        ({**TIERS, "learned": {**TIERS["learned"], "threshold": 1.5}}, "less than or equal to 1"),
    ],
)
def test_learned_route_settings_are_checked(route: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        RouteSettings.model_validate(route)


def test_the_shipped_scorer_is_deterministic_for_a_fixed_weights_file() -> None:
    scorer = shipped_scorer()
    again = load_scorer("ngram-v1")
    copy = decode(encode(scorer.name, scorer.spec, scorer.bias, scorer.weights, {}), "round trip")
    for text in (EASY, HARD, "", "x" * 50_000):
        first = scorer.score(text)
        assert 0.0 < first < 1.0
        assert again.score(text) == first == copy.score(text)


def test_the_shipped_route_sends_each_score_to_its_tier() -> None:
    policy = shipped_policy()
    route = policy.routes["auto-learned"]
    assert route.learned is not None
    threshold = route.learned.threshold
    scorer = shipped_scorer()
    texts = [
        EASY,
        HARD,
        "hello",
        "Write a haiku about autumn.",
        "Prove that 2 is prime.",
        "Rewrite this sentence in the passive voice: The cat ate the fish.",
    ]
    tiers = set()
    for text in texts:
        score = scorer.score(text)
        request = replace(
            features("auto-learned", prompt_tokens=50),
            strong_score=StrongScore("ngram-v1", score),
        )
        result = run(policy, request)
        expected = "gpt-4.1" if score >= threshold else "deepseek-v3.2"
        assert result.candidates[0].model == expected, (text, score, threshold)
        tiers.add(expected)
    # both tiers are reachable from ordinary prompts
    assert tiers == {"gpt-4.1", "deepseek-v3.2"}
