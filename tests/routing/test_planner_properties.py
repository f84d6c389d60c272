"""Properties of the planner over generated catalogs and requests."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.routing.candidates import Plan
from gateway.routing.features import RequestFeatures
from gateway.settings.policy import Policy
from tests.routing.support import build_policy, run

CAPABILITIES = ["tools", "vision", "json_schema", "reasoning", "streaming"]
STRATEGIES = ["cheapest", "quality", "weighted", "ordered", "latency"]

prices = st.decimals(min_value=0, max_value=30, places=2, allow_nan=False, allow_infinity=False)


@st.composite
def model_specs(draw: st.DrawFn) -> dict[str, Any]:
    max_output = draw(st.integers(256, 64_000))
    return {
        "deployments": [
            {"provider": f"p{i}", "upstream_model": "m", "weight": draw(st.integers(1, 5))}
            for i in range(draw(st.integers(1, 3)))
        ],
        "prices": {"input": str(draw(prices)), "output": str(draw(prices))},
        "context_window": draw(st.sampled_from([4_000, 32_000, 128_000, 200_000, 1_000_000])),
        "max_output_tokens": max_output,
        "capabilities": draw(st.lists(st.sampled_from(CAPABILITIES), unique=True)),
        "quality": {"general": draw(st.floats(0, 1).map(lambda q: round(q, 2)))},
    }


@st.composite
def policies(draw: st.DrawFn, strategies: list[str] = STRATEGIES) -> Policy:
    names = draw(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=6, unique=True))
    models = {name: draw(model_specs()) for name in names}
    strategy = draw(st.sampled_from(strategies))
    route: dict[str, Any] = {
        "strategy": strategy,
        "models": draw(st.permutations(names)),
        "min_quality": draw(st.none() | st.floats(0, 1).map(lambda q: round(q, 2))),
        "expected_output_tokens": draw(st.none() | st.integers(1, 4000)),
    }
    if strategy == "weighted":
        route["weights"] = [draw(st.integers(1, 10)) for _ in names]
    if draw(st.booleans()):
        route["max_cost_usd"] = str(draw(st.decimals(0, 5, places=3)))
    return build_policy(models=models, routes={"r": route})


@st.composite
def requests(draw: st.DrawFn) -> RequestFeatures:
    return RequestFeatures(
        requested="r",
        prompt_tokens=draw(st.integers(1, 1_200_000)),
        max_tokens=draw(st.none() | st.integers(1, 70_000)),
        has_tools=draw(st.booleans()),
        has_images=draw(st.booleans()),
        json_schema=draw(st.booleans()),
        stream=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32)),
        user=draw(st.none() | st.sampled_from(["u1", "u2", "u3"])),
    )


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def plan_or_none(policy: Policy, request: RequestFeatures) -> Plan | None:
    try:
        return run(policy, request)
    except InvalidRequest as error:
        assert error.code in ("context_length_exceeded", "no_eligible_model")
        return None


@PROPERTY
@given(policies(), requests())
def test_never_picks_a_model_lacking_a_capability_or_too_small(
    policy: Policy, request: RequestFeatures
) -> None:
    result = plan_or_none(policy, request)
    if result is None:
        return
    for candidate in result.candidates:
        model = policy.models[candidate.model]
        assert request.required_capabilities <= set(model.capabilities)
        # a cap above the model's maximum output is served clamped (routes clamp by default)
        output = min(request.max_tokens or 0, model.max_output_tokens)
        assert request.prompt_tokens + output <= model.context_window


@PROPERTY
@given(policies(), requests())
def test_candidates_meet_the_floor_and_the_cost_cap(
    policy: Policy, request: RequestFeatures
) -> None:
    result = plan_or_none(policy, request)
    if result is None:
        return
    for candidate in result.candidates:
        if result.min_quality is not None:
            assert candidate.quality is not None and candidate.quality >= result.min_quality
        if result.max_cost_usd is not None:
            assert candidate.expected_cost_usd <= result.max_cost_usd


@PROPERTY
@given(policies(strategies=["cheapest"]), requests())
def test_cheapest_never_ranks_a_costlier_candidate_ahead_of_a_cheaper_one(
    policy: Policy, request: RequestFeatures
) -> None:
    result = plan_or_none(policy, request)
    if result is None:
        return
    costs = [c.expected_cost_usd for c in result.candidates if not c.fallback]
    assert costs == sorted(costs)


@PROPERTY
@given(policies(), requests())
def test_plans_are_deterministic(policy: Policy, request: RequestFeatures) -> None:
    first = plan_or_none(policy, request)
    again = plan_or_none(policy, request)
    assert first == again


@PROPERTY
@given(policies(), requests())
def test_every_pool_model_is_either_a_candidate_or_dropped_with_a_reason(
    policy: Policy, request: RequestFeatures
) -> None:
    result = plan_or_none(policy, request)
    if result is None:
        return
    for dropped in result.dropped:
        assert dropped.reason.strip()
    deployments = {(c.model, c.deployment.id) for c in result.candidates}
    for dropped in result.dropped:
        if dropped.deployment is not None:
            deployments.add((dropped.model, dropped.deployment.id))
    whole = {d.model for d in result.dropped if d.deployment is None}
    for name in policy.routes["r"].models:
        count = len(policy.models[name].deployments)
        seen = sum(1 for model, _ in deployments if model == name)
        assert name in whole or seen == count


@PROPERTY
@given(policies(), requests())
def test_context_error_only_when_no_model_of_the_route_fits(
    policy: Policy, request: RequestFeatures
) -> None:
    try:
        run(policy, request)
    except InvalidRequest as error:
        if error.code == "context_length_exceeded":
            needed = request.prompt_tokens + (request.max_tokens or 0)
            assert all(m.context_window < needed for m in policy.models.values())
            largest = max(m.context_window for m in policy.models.values())
            assert f"{largest} tokens" in error.message


def test_cheapest_property_holds_with_a_costlier_model_listed_first() -> None:
    # a hand-made witness: the pool lists the expensive model first
    policy = build_policy(
        models={
            "dear": {
                "deployments": [{"provider": "x", "upstream_model": "dear"}],
                "prices": {"input": "5", "output": "5"},
                "quality": {"general": 0.9},
            },
            "cheap": {
                "deployments": [{"provider": "y", "upstream_model": "cheap"}],
                "prices": {"input": "1", "output": "1"},
                "quality": {"general": 0.9},
            },
        },
        routes={"r": {"strategy": "cheapest", "models": ["dear", "cheap"], "min_quality": 0.9}},
    )
    result = run(policy, RequestFeatures(requested="r", prompt_tokens=100, max_tokens=10))
    assert [c.model for c in result.candidates] == ["cheap", "dear"]
    assert result.candidates[0].expected_cost_usd == Decimal("0.00011")
