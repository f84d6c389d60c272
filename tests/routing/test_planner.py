"""Table-driven planner cases on the small catalog of `support.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from gateway.errors import InvalidRequest, NotFound
from gateway.routing.candidates import Plan
from gateway.routing.features import stable_hash
from gateway.routing.state import LiveStats
from tests.routing.support import build_policy, dropped_reasons, features, models_of, run

POLICY = build_policy()


@dataclass(frozen=True)
class Case:
    name: str
    route: str
    expected: list[str]
    request: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    dropped: dict[str, str] = field(default_factory=dict)


CASES = [
    Case(
        "cheapest meeting the floor skips the model below it",
        "auto",
        ["mid", "wide", "premium"],
        reason="cheapest-meeting-0.8",
        dropped={"cheap": "quality 0.60 below floor 0.8 for general"},
    ),
    Case(
        "images need vision",
        "auto",
        ["wide", "premium"],
        {"has_images": True},
        dropped={"cheap": "lacks vision", "mid": "lacks vision"},
    ),
    Case(
        "json_schema needs the capability",
        "any",
        ["mid", "wide", "premium"],
        {"json_schema": True, "json_mode": True},
        dropped={"cheap": "lacks json_schema"},
    ),
    Case("no floor: cheapest first", "any", ["cheap", "mid", "wide", "premium"], reason="cheapest"),
    Case(
        "a context window too small falls back to a larger model",
        "any",
        ["mid", "wide", "premium"],
        {"prompt_tokens": 10_000},
        dropped={"cheap": "context window 8000 too small for 10000 prompt tokens"},
    ),
    Case(
        "150k tokens fit only the wide and premium models",
        "any",
        ["wide", "premium"],
        {"prompt_tokens": 150_000},
    ),
    Case("300k tokens fit only the 1M window", "any", ["wide"], {"prompt_tokens": 300_000}),
    Case(
        "max_tokens counts toward the context window",
        "any",
        ["mid", "wide", "premium"],
        {"prompt_tokens": 7_000, "max_tokens": 1_500},
        dropped={"cheap": "context window 8000 too small for 7000 prompt tokens + max_tokens 1500"},
    ),
    Case(
        "max_tokens above a model's max output drops it on a refusing route",
        "any-refusing",
        ["mid", "wide", "premium"],
        {"max_tokens": 5_000},
        dropped={"cheap": "max_tokens 5000 above its max output 2000"},
    ),
    Case(
        "max_tokens above a model's max output keeps it by default (served clamped)",
        "any",
        ["cheap", "mid", "wide", "premium"],
        {"max_tokens": 5_000},
    ),
    Case(
        "quality: best score within the cost cap",
        "best",
        ["wide", "mid", "cheap"],
        reason="best-quality-under-0.01usd",
    ),
    Case(
        "ordered keeps priority, fallbacks last",
        "ordered",
        ["premium", "mid", "cheap"],
        reason="ordered",
    ),
    Case(
        "task class changes which scores count",
        "code",
        ["mid", "premium"],
        dropped={
            "cheap": "quality 0.50 below floor 0.8 for code",
            "wide": "quality 0.70 below floor 0.8 for code",
        },
    ),
    Case(
        "a concrete model is a route of one, no floor", "cheap", ["cheap"], reason="requested-model"
    ),
    Case("an alias works like the model name", "tiny", ["cheap"], reason="requested-model"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planner_cases(case: Case) -> None:
    request = {**case.request}
    if case.route == "best":
        policy = build_policy(
            routes={
                "best": {
                    "strategy": "quality",
                    "models": ["cheap", "mid", "wide", "premium"],
                    "max_cost_usd": "0.01",
                    "expected_output_tokens": 500,
                }
            }
        )
    else:
        policy = POLICY
    result = run(policy, features(case.route, **request))
    assert models_of(result) == case.expected
    if case.reason is not None:
        assert result.reason == case.reason
    reasons = dropped_reasons(result)
    for model, reason in case.dropped.items():
        assert reasons[model] == reason


def test_expected_cost_counts_prompt_and_output_at_list_prices() -> None:
    result = run(POLICY, features("any", prompt_tokens=1000))
    costs = {c.model: c.expected_cost_usd for c in result.candidates}
    # 1000 in + 500 out (the route's expected output) per million
    assert costs["cheap"] == Decimal("0.0002")
    assert costs["mid"] == Decimal("0.00125")
    assert costs["premium"] == Decimal("0.0105")


def test_output_estimate_is_max_tokens_capped_by_the_route_median() -> None:
    stats = LiveStats(median_output_tokens={"any": 200})
    capped = run(POLICY, features("any", max_tokens=1000), stats=stats).candidates[0]
    assert capped.expected_output_tokens == 200
    uncapped = run(POLICY, features("any", max_tokens=1000)).candidates[0]
    assert uncapped.expected_output_tokens == 1000
    by_median = run(POLICY, features("any"), stats=stats).candidates[0]
    assert by_median.expected_output_tokens == 200


def test_output_estimate_defaults_to_the_models_max_output_without_route_hint() -> None:
    result = run(POLICY, features("ordered"))
    by_model = {c.model: c.expected_output_tokens for c in result.candidates}
    assert by_model == {"premium": 32000, "mid": 8000, "cheap": 2000}


def test_every_deployment_of_a_model_is_a_candidate() -> None:
    result = run(POLICY, features("premium"))
    assert sorted(c.deployment.id for c in result.candidates) == ["bigco-a", "bigco-b"]
    assert {c.deployment.provider for c in result.candidates} == {"bigco", "bigco-eu"}


def test_default_deployment_id_is_provider_and_upstream_model() -> None:
    candidate = run(POLICY, features("mid")).candidates[0]
    assert candidate.deployment.id == "midco/mid-1"
    assert candidate.deployment.upstream_model == "mid-1"


def test_fallbacks_are_marked_and_come_after_the_strategy() -> None:
    result = run(POLICY, features("ordered"))
    assert [c.fallback for c in result.candidates] == [False, False, False, True]
    assert result.candidates[-1].reason == "fallback 1"


def test_latency_orders_by_measured_ttft_then_unmeasured_by_cost() -> None:
    stats = LiveStats(ttft_ewma_ms={"wideco/wide-1": 120.0, "bigco-b": 300.0, "bigco-a": 900.0})
    result = run(POLICY, features("fast"), stats=stats)
    assert [c.deployment.id for c in result.candidates] == [
        "wideco/wide-1",
        "bigco-b",
        "bigco-a",
        "midco/mid-1",
    ]
    assert result.reason == "lowest-ttft-meeting-0.8"
    assert "120 ms" in result.candidates[0].reason


def test_prompt_larger_than_every_window_is_a_400_naming_tokens_and_largest_window() -> None:
    with pytest.raises(InvalidRequest) as caught:
        run(POLICY, features("any", prompt_tokens=2_000_000))
    error = caught.value
    assert error.code == "context_length_exceeded"
    assert error.status == 400
    assert "2000000 prompt tokens" in error.message
    assert "1000000 tokens (wide)" in error.message


def test_nothing_eligible_is_a_400_listing_each_models_reason() -> None:
    with pytest.raises(InvalidRequest) as caught:
        run(POLICY, features("code", has_images=True, prompt_tokens=250_000))
    error = caught.value
    assert error.code == "no_eligible_model"
    assert "mid: lacks vision" in error.message
    assert "wide: quality 0.70 below floor 0.8 for code" in error.message
    assert "premium: context window 200000 too small" in error.message


def test_unknown_model_is_not_found() -> None:
    with pytest.raises(NotFound) as caught:
        run(POLICY, features("gpt-9"))
    assert caught.value.status == 404
    assert "gpt-9" in caught.value.message
    assert caught.value.param == "model"


def test_route_header_carries_route_and_reason() -> None:
    assert run(POLICY, features("auto")).route_header() == "auto; reason=cheapest-meeting-0.8"


def test_weighted_split_follows_the_weights_over_many_requests() -> None:
    firsts = [run(POLICY, features("split", seed=seed)).candidates[0].model for seed in range(2000)]
    share = firsts.count("mid") / len(firsts)
    assert 0.70 < share < 0.80  # weights 3:1
    assert run(POLICY, features("split", seed=7)).reason == "weighted"


def test_weighted_keeps_the_other_models_as_fallbacks() -> None:
    assert sorted(models_of(run(POLICY, features("split", seed=3)))) == ["mid", "wide"]


def test_sticky_routes_send_one_user_to_one_model_whatever_the_seed() -> None:
    def first(user: str, seed: int) -> str:
        return run(POLICY, features("sticky", user=user, seed=seed)).candidates[0].model

    for user in ("alice", "bob", "carol", "dave"):
        assert len({first(user, seed) for seed in range(20)}) == 1
    assert len({first(f"user-{n}", 0) for n in range(30)}) == 2


def test_deployments_of_one_model_share_traffic_by_weight() -> None:
    firsts = [
        run(POLICY, features("premium", seed=seed)).candidates[0].deployment.id
        for seed in range(1000)
    ]
    assert 0.4 < firsts.count("bigco-a") / len(firsts) < 0.6


def plan_draws(result: Plan) -> list[tuple[str, str, str]]:
    return [(c.model, c.deployment.id, c.reason) for c in result.candidates]


@pytest.mark.parametrize("route", ["split", "premium", "sticky"])
def test_a_request_id_seed_draws_as_its_stable_hash(route: str) -> None:
    """The serving path seeds a plan with the request id, hashed only when the plan draws:
    each weighted draw (models of a route, deployments of a model, a sticky route's
    fallback to the request when there is no user or key) is the one its hash seeds, as
    when the id was hashed up front, so replicas of either version pick alike."""
    ids = [f"req-{n}" for n in range(300)]
    for request_id in ids:
        lazily = run(POLICY, features(route, seed=request_id))
        eagerly = run(POLICY, features(route, seed=stable_hash(request_id)))
        assert plan_draws(lazily) == plan_draws(eagerly)
        assert lazily.reason == eagerly.reason
    # and the ids do draw: more than one first pick across them
    firsts = {plan_draws(run(POLICY, features(route, seed=i)))[0][:2] for i in ids}
    assert len(firsts) > 1


def test_a_sticky_route_draws_by_the_user_whatever_the_request_id() -> None:
    def first(user: str | None, key_id: str | None, request_id: str) -> str:
        return (
            run(POLICY, features("sticky", user=user, key_id=key_id, seed=request_id))
            .candidates[0]
            .model
        )

    for user in ("alice", "bob", "carol"):
        assert len({first(user, "k1", f"req-{n}") for n in range(20)}) == 1
        assert first(user, "k1", "req-0") == first(user, None, "other")
    assert first(None, "k9", "req-0") == first(None, "k9", "req-1")


def test_the_plan_structs_fields_are_in_the_order_the_planner_passes_them() -> None:
    """policy_engine builds these positionally: a field moved or added in between must
    change it too."""
    from gateway.routing.candidates import Candidate, Plan
    from gateway.routing.strategies import Eligible, Ranking

    assert Ranking.__struct_fields__ == (
        "strategy", "min_quality", "max_cost_usd", "weights", "seed", "sticky", "concrete",
        "learned", "measured",
    )  # fmt: skip
    assert Eligible.__struct_fields__ == (
        "model", "deployment", "cost", "output_tokens", "quality", "pool_index",
        "deployment_rank", "ttft_ms",
    )  # fmt: skip
    assert Candidate.__struct_fields__ == (
        "model", "deployment", "expected_cost_usd", "expected_output_tokens", "quality",
        "reason", "fallback",
    )  # fmt: skip
    assert Plan.__struct_fields__ == (
        "requested", "route", "strategy", "task_class", "min_quality", "max_cost_usd",
        "reason", "candidates", "dropped", "prompt_tokens", "rules", "notes",
        "learned_score", "learned_threshold", "learned_tier", "learned_scorer",
        "learned_target", "learned_predicted", "quality_status", "request_kind",
    )  # fmt: skip
