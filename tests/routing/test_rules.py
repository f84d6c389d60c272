"""Rules (`when` -> `then`, in order), header overrides and budget downgrades."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from gateway.errors import InvalidRequest, NotFound
from gateway.routing.rules import matches
from gateway.routing.state import TenantState
from gateway.settings.routes import RuleWhen
from tests.routing.support import (
    NOON,
    build_policy,
    dropped_reasons,
    features,
    models_of,
    overrides,
    run,
)

KEY_HASH = "sha256:" + "ab" * 32


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 2, hour, minute, tzinfo=UTC)


MATCH_CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("empty when matches all", {}, {}, True),
    ("tenant listed", {"tenant": ["acme", "globex"]}, {"tenant": "acme"}, True),
    ("tenant as one string", {"tenant": "acme"}, {"tenant": "acme"}, True),
    ("tenant not listed", {"tenant": ["globex"]}, {"tenant": "acme"}, False),
    ("no tenant never matches a tenant list", {"tenant": ["acme"]}, {}, False),
    ("key", {"key": ["k1"]}, {"key_id": "k1"}, True),
    ("route", {"route": ["auto"]}, {}, True),
    ("other route", {"route": ["best"]}, {}, False),
    (
        "header names are case-insensitive",
        {"headers": {"X-Team": "ml"}},
        {"headers": {"x-team": "ml"}},
        True,
    ),
    (
        "header value must be equal",
        {"headers": {"x-team": "ml"}},
        {"headers": {"x-team": "web"}},
        False,
    ),
    ("has tools", {"has_tools": True}, {"has_tools": True}, True),
    ("has no tools", {"has_tools": False}, {"has_tools": True}, False),
    ("has images", {"has_images": True}, {"has_images": False}, False),
    ("json mode", {"json_mode": True}, {"json_mode": True}, True),
    ("prompt above", {"prompt_tokens_above": 999}, {"prompt_tokens": 1000}, True),
    ("prompt not above", {"prompt_tokens_above": 1000}, {"prompt_tokens": 1000}, False),
    ("prompt below", {"prompt_tokens_below": 1001}, {"prompt_tokens": 1000}, True),
    ("max_tokens above", {"max_tokens_above": 100}, {"max_tokens": 200}, True),
    ("max_tokens below", {"max_tokens_below": 100}, {"max_tokens": 200}, False),
    ("unset max_tokens counts as above", {"max_tokens_above": 100}, {}, True),
    ("unset max_tokens is never below", {"max_tokens_below": 100}, {}, False),
    (
        "regex searches the last user message",
        {"last_user_message_matches": r"(?i)\bdef\b"},
        {"last_user_message": "please fix: DEF foo()"},
        True,
    ),
    ("regex miss", {"last_user_message_matches": r"```"}, {"last_user_message": "hello"}, False),
]


@pytest.mark.parametrize(
    ("when", "request_fields", "expected"),
    [c[1:] for c in MATCH_CASES],
    ids=[c[0] for c in MATCH_CASES],
)
def test_rule_conditions(
    when: dict[str, Any], request_fields: dict[str, Any], expected: bool
) -> None:
    condition = RuleWhen.model_validate(when)
    assert matches(condition, features(**request_fields), "auto", TenantState(), NOON) is expected


@pytest.mark.parametrize(
    ("moment", "expected"),
    [(at(23, 30), True), (at(5, 59), True), (at(6, 0), False), (at(12), False), (at(22), True)],
)
def test_time_of_day_window_wraps_past_midnight(moment: datetime, expected: bool) -> None:
    condition = RuleWhen.model_validate({"time_of_day": "22:00-06:00"})
    assert matches(condition, features(), "auto", TenantState(), moment) is expected


def test_time_of_day_is_read_in_utc() -> None:
    condition = RuleWhen.model_validate({"time_of_day": "22:00-23:00"})
    paris_midnight = datetime(2026, 3, 2, 23, 30, tzinfo=timezone(timedelta(hours=1)))
    assert matches(condition, features(), "auto", TenantState(), paris_midnight)


def test_budget_used_above() -> None:
    condition = RuleWhen.model_validate({"budget_used_above": 0.8})
    assert matches(condition, features(), "auto", TenantState(0.81), NOON)
    assert not matches(condition, features(), "auto", TenantState(0.8), NOON)


def test_rule_sets_task_class_from_the_message() -> None:
    policy = build_policy(
        rules=[{"when": {"last_user_message_matches": "```"}, "then": {"task_class": "code"}}]
    )
    result = run(policy, features(last_user_message="```py\nx = 1\n```"))
    assert result.task_class == "code"
    assert models_of(result) == ["mid", "premium"]
    assert result.rules == ("rules[0]",)


def test_rule_raises_the_quality_floor() -> None:
    policy = build_policy(
        rules=[{"name": "vip", "when": {"tenant": "vip"}, "then": {"min_quality": 0.9}}]
    )
    assert models_of(run(policy, features(tenant="vip"))) == ["premium"]
    assert models_of(run(policy, features(tenant="other"))) == ["mid", "wide", "premium"]


def test_rule_lowers_the_quality_floor() -> None:
    policy = build_policy(rules=[{"when": {}, "then": {"min_quality": 0.5}}])
    result = run(policy, features())
    assert models_of(result)[0] == "cheap"
    assert result.reason == "cheapest-meeting-0.5"


def test_rule_caps_expected_cost() -> None:
    policy = build_policy(rules=[{"name": "cap", "when": {}, "then": {"max_cost_usd": "0.002"}}])
    result = run(policy, features())
    assert models_of(result) == ["mid"]
    assert result.max_cost_usd == Decimal("0.002")
    assert dropped_reasons(result)["wide"] == "expected cost $0.003000 above cap $0.002000"


def test_cost_caps_combine_so_the_lowest_holds() -> None:
    policy = build_policy(
        rules=[
            {"when": {}, "then": {"max_cost_usd": "0.002"}},
            {"when": {}, "then": {"max_cost_usd": "1.00"}},
        ]
    )
    assert run(policy, features()).max_cost_usd == Decimal("0.002")


def test_rule_excludes_a_model_and_says_which_rule() -> None:
    policy = build_policy(
        rules=[{"name": "no-mid", "when": {"tenant": "acme"}, "then": {"exclude_models": ["mid"]}}]
    )
    result = run(policy, features(tenant="acme"))
    assert models_of(result) == ["wide", "premium"]
    assert dropped_reasons(result)["mid"] == "excluded by rule no-mid"


def test_rule_includes_a_model_in_the_pool() -> None:
    policy = build_policy(rules=[{"when": {}, "then": {"include_models": ["wide"]}}])
    assert models_of(run(policy, features("ordered"))) == ["premium", "mid", "wide", "cheap"]


def test_rule_excludes_a_provider() -> None:
    policy = build_policy(
        rules=[{"name": "eu-off", "when": {}, "then": {"exclude_providers": ["bigco-eu"]}}]
    )
    result = run(policy, features("premium"))
    assert [c.deployment.id for c in result.candidates] == ["bigco-a"]
    assert result.dropped[0].reason == "provider bigco-eu excluded by rule eu-off"


def test_rule_keeps_only_some_providers() -> None:
    policy = build_policy(
        rules=[{"name": "eu", "when": {}, "then": {"only_providers": ["bigco-eu", "midco"]}}]
    )
    result = run(policy, features("auto"))
    assert [c.deployment.id for c in result.candidates] == ["midco/mid-1", "bigco-b"]
    assert "provider wideco not allowed by rule eu" in {d.reason for d in result.dropped}


def test_rule_forces_a_route_and_later_rules_see_it() -> None:
    policy = build_policy(
        rules=[
            {"name": "to-code", "when": {"has_tools": True}, "then": {"route": "code"}},
            {"name": "code-cap", "when": {"route": "code"}, "then": {"exclude_models": ["mid"]}},
        ]
    )
    result = run(policy, features(has_tools=True))
    assert result.route == "code"
    assert models_of(result) == ["premium"]
    assert result.rules == ("to-code", "code-cap")


def test_rules_apply_in_order_the_last_floor_wins() -> None:
    policy = build_policy(
        rules=[
            {"when": {}, "then": {"min_quality": 0.9}},
            {"when": {}, "then": {"min_quality": 0.5}},
        ]
    )
    assert run(policy, features()).min_quality == 0.5


def test_last_stops_evaluation() -> None:
    policy = build_policy(
        rules=[
            {"name": "first", "when": {}, "then": {"min_quality": 0.9}, "last": True},
            {"name": "never", "when": {}, "then": {"min_quality": 0.5}},
        ]
    )
    result = run(policy, features())
    assert result.min_quality == 0.9
    assert result.rules == ("first",)


def test_a_forced_route_keeps_what_earlier_rules_set() -> None:
    policy = build_policy(
        rules=[
            {"when": {}, "then": {"task_class": "code"}},
            {"when": {}, "then": {"route": "any"}},
        ]
    )
    result = run(policy, features())
    assert (result.route, result.task_class) == ("any", "code")


def test_quality_floor_and_cost_cap_do_not_apply_to_a_concrete_model() -> None:
    policy = build_policy(rules=[{"when": {}, "then": {"min_quality": 0.99, "max_cost_usd": "0"}}])
    assert models_of(run(policy, features("cheap"))) == ["cheap"]


def test_rule_exclusion_applies_to_a_concrete_model() -> None:
    policy = build_policy(rules=[{"when": {}, "then": {"exclude_models": ["tiny"]}}])
    with pytest.raises(InvalidRequest, match="excluded by rule") as caught:
        run(policy, features("cheap"))
    assert caught.value.code == "no_eligible_model"


# -- overrides --------------------------------------------------------------------------

TENANTS = {
    "open": {"allow_overrides": True},
    "closed": {"allow_overrides": False},
}


def test_route_override_header_for_an_allowed_tenant() -> None:
    policy = build_policy(tenants=TENANTS)
    result = run(policy, features(tenant="open", overrides=overrides(route="any")))
    assert result.route == "any"
    assert result.requested == "auto"


def test_overrides_are_ignored_with_a_note_for_a_tenant_not_allowed() -> None:
    policy = build_policy(tenants=TENANTS)
    request = features(tenant="closed", overrides=overrides(route="any", min_quality=0.9))
    result = run(policy, request)
    assert result.route == "auto"
    assert result.min_quality == 0.8
    assert any("ignored" in note for note in result.notes)


def test_min_quality_override() -> None:
    policy = build_policy(tenants=TENANTS)
    result = run(policy, features(tenant="open", overrides=overrides(min_quality=0.9)))
    assert models_of(result) == ["premium"]


def test_min_quality_override_beats_rules() -> None:
    policy = build_policy(tenants=TENANTS, rules=[{"when": {}, "then": {"min_quality": 0.9}}])
    result = run(policy, features(tenant="open", overrides=overrides(min_quality=0.5)))
    assert result.min_quality == 0.5


def test_max_cost_override_caps_the_plan() -> None:
    policy = build_policy(tenants=TENANTS)
    result = run(policy, features(tenant="open", overrides=overrides(max_cost="0.002")))
    assert models_of(result) == ["mid"]


def test_overrides_allowed_without_tenancy() -> None:
    result = run(build_policy(), features(overrides=overrides(route="best")))
    assert result.route == "best"


def test_unknown_route_override_names_the_header() -> None:
    policy = build_policy(tenants=TENANTS)
    with pytest.raises(NotFound) as caught:
        run(policy, features(tenant="open", overrides=overrides(route="nope")))
    assert caught.value.param == "x-gateway-route"


# -- budget downgrade -------------------------------------------------------------------

BUDGET_TENANTS = {
    "acme": {
        "budgets": [
            {"usd": "100", "downgrade_fraction": 0.8, "downgrade_route": "any"},
        ],
        "keys": [
            {
                "id": "acme-batch",
                "hash": KEY_HASH,
                "budgets": [{"usd": "10", "downgrade_fraction": 0.5, "downgrade_route": "cheap"}],
            }
        ],
    }
}


def test_budget_downgrade_switches_route_above_the_fraction() -> None:
    policy = build_policy(tenants=BUDGET_TENANTS)
    below = run(policy, features(tenant="acme"), used=0.79)
    assert (below.route, below.reason) == ("auto", "cheapest-meeting-0.8")
    above = run(policy, features(tenant="acme"), used=0.85)
    assert above.route == "any"
    assert above.reason == "cheapest+budget-downgrade"
    assert models_of(above)[0] == "cheap"
    assert any("budget 85% used" in note for note in above.notes)


def test_key_budget_downgrade_comes_before_the_tenants() -> None:
    policy = build_policy(tenants=BUDGET_TENANTS)
    result = run(policy, features(tenant="acme", key_id="acme-batch"), used=0.85)
    assert result.route == "cheap"
    assert models_of(result) == ["cheap"]


def test_budget_downgrade_applies_to_a_concrete_model_request_too() -> None:
    policy = build_policy(tenants=BUDGET_TENANTS)
    result = run(policy, features("premium", tenant="acme"), used=0.9)
    assert result.route == "any"


def test_no_downgrade_without_a_tenant() -> None:
    assert run(build_policy(tenants=BUDGET_TENANTS), features(), used=0.99).route == "auto"
