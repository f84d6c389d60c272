"""The rule schema: what a policy file may say, and the references the loader checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.settings import SettingsError, load_settings
from gateway.settings.routes import RouteSettings, RuleSettings, rule_reference_problems


def rule(**fields: Any) -> RuleSettings:
    return RuleSettings.model_validate(fields)


def test_one_name_is_accepted_where_a_list_is_expected() -> None:
    parsed = rule(when={"tenant": "acme", "route": "auto"}, then={"task_class": "code"})
    assert parsed.when.tenant == ["acme"]
    assert parsed.when.route == ["auto"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"when": {"last_user_message_matches": "(unclosed"}, "then": {"task_class": "x"}},
            "invalid regular expression",
        ),
        ({"when": {"time_of_day": "25:00-01:00"}, "then": {"task_class": "x"}}, "HH:MM-HH:MM"),
        ({"when": {"time_of_day": "9-17"}, "then": {"task_class": "x"}}, "HH:MM-HH:MM"),
        ({"then": {}}, "must change at least one thing"),
        ({"when": {"budget_used_above": 1.5}, "then": {"task_class": "x"}}, "less than or equal"),
        ({"when": {"tenat": "acme"}, "then": {"task_class": "x"}}, "Extra inputs"),
        ({"then": {"min_quality": 2}}, "less than or equal"),
    ],
)
def test_invalid_rules_are_rejected_with_a_reason(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        rule(**fields)


def test_route_weights_must_have_a_positive_one() -> None:
    with pytest.raises(ValidationError, match="at least one above 0"):
        RouteSettings.model_validate({"models": ["a", "b"], "weights": [0, 0]})


def test_rule_references_to_unknown_names_are_reported_with_their_path() -> None:
    rules = [
        rule(when={"tenant": "ghost", "route": "auto"}, then={"exclude_models": ["gpt-9"]}),
        rule(when={"key": "k-none"}, then={"only_providers": ["nowhere"], "route": "lost"}),
    ]
    problems = rule_reference_problems(
        rules,
        model_names={"gpt-4.1", "gpt4.1"},
        route_names={"auto"},
        provider_names={"openai"},
        tenant_names={"acme"},
        key_ids={"k1"},
        where="policies/routes.yaml",
    )
    assert problems == [
        "policies/routes.yaml: rules[0].when.tenant: unknown tenant 'ghost'",
        "policies/routes.yaml: rules[0].then.exclude_models: unknown model 'gpt-9'",
        "policies/routes.yaml: rules[1].when.key: unknown key id 'k-none'",
        "policies/routes.yaml: rules[1].then.only_providers: unknown provider 'nowhere'",
        "policies/routes.yaml: rules[1].then.route: unknown route 'lost'",
    ]


def test_known_references_raise_no_problem() -> None:
    rules = [rule(when={"route": "gpt4.1"}, then={"include_models": ["gpt-4.1"], "route": "auto"})]
    problems = rule_reference_problems(
        rules,
        model_names={"gpt-4.1", "gpt4.1"},
        route_names={"auto"},
        provider_names=set(),
        tenant_names=set(),
        key_ids=set(),
        where="x",
    )
    assert problems == []


def test_loading_a_policy_with_broken_rule_references_fails_with_each_problem(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.yaml").write_text(
        """
models:
  m: {deployments: [{provider: p, upstream_model: m}]}
routes:
  auto: {models: [m]}
tenants:
  acme:
    budgets: [{usd: 10, downgrade_fraction: 0.9, downgrade_route: cheapo}]
rules:
  - when: {route: auto}
    then: {exclude_models: [ghost]}
""",
        encoding="utf-8",
    )
    (tmp_path / "gateway.yaml").write_text(
        "providers: {p: {kind: openai}}\npolicies: [policy.yaml]\n", encoding="utf-8"
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path / "gateway.yaml", env={})
    problems = "\n".join(caught.value.problems)
    assert "rules[0].then.exclude_models: unknown model 'ghost'" in problems
    assert "tenants.acme.budgets[0].downgrade_route: unknown route 'cheapo'" in problems
