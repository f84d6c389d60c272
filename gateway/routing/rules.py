"""Policy rules: `when` conditions over a request, `then` changes to its decision."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, time

from msgspec.structs import replace

from gateway.routing.decision import Decision, canonical_model
from gateway.routing.features import RequestFeatures
from gateway.routing.state import TenantState
from gateway.settings.policy import Policy
from gateway.settings.routes import RuleSettings, RuleThen, RuleWhen


def policy_rules(policy: Policy) -> Sequence[RuleSettings]:
    """The policy's top-level `rules:` list, in file order ([] if it has none)."""
    rules: Sequence[RuleSettings] = getattr(policy, "rules", None) or ()
    return rules


def apply_rules(
    decision: Decision,
    policy: Policy,
    features: RequestFeatures,
    tenant_state: TenantState,
    now: datetime,
) -> Decision:
    for index, rule in enumerate(policy_rules(policy)):
        if not matches(rule.when, features, decision.route_name, tenant_state, now):
            continue
        label = rule.label(index)
        decision = apply_then(decision, rule.then, policy, label)
        decision = replace(decision, rules=(*decision.rules, label))
        if rule.last:
            break
    return decision


def matches(
    when: RuleWhen,
    features: RequestFeatures,
    route_name: str,
    tenant_state: TenantState,
    now: datetime,
) -> bool:
    """All of `when` holds; cheap conditions first, the regex last and only if needed."""
    return (
        (when.tenant is None or features.tenant in when.tenant)
        and (when.key is None or features.key_id in when.key)
        and (when.route is None or route_name in when.route)
        and (
            when.headers is None
            or all(features.headers.get(k) == v for k, v in when.headers.items())
        )
        and (when.has_tools is None or when.has_tools == features.has_tools)
        and (when.has_images is None or when.has_images == features.has_images)
        and (when.json_mode is None or when.json_mode == features.json_mode)
        and (when.prompt_tokens_above is None or features.prompt_tokens > when.prompt_tokens_above)
        and (when.prompt_tokens_below is None or features.prompt_tokens < when.prompt_tokens_below)
        and _max_tokens_holds(when, features.max_tokens)
        and (when.time_of_day is None or when.time_of_day.contains(_utc_clock(now)))
        and (
            when.budget_used_above is None
            or tenant_state.budget_used_fraction > when.budget_used_above
        )
        and (
            when.last_user_message_matches is None
            or re.search(when.last_user_message_matches, features.last_user_message) is not None
        )
    )


def _max_tokens_holds(when: RuleWhen, max_tokens: int | None) -> bool:
    # a request without max_tokens satisfies neither bound: its output is open-ended
    if when.max_tokens_above is None and when.max_tokens_below is None:
        return True
    if max_tokens is None:
        return when.max_tokens_above is not None and when.max_tokens_below is None
    above_ok = when.max_tokens_above is None or max_tokens > when.max_tokens_above
    below_ok = when.max_tokens_below is None or max_tokens < when.max_tokens_below
    return above_ok and below_ok


def _utc_clock(now: datetime) -> time:
    moment = now if now.tzinfo is None else now.astimezone(UTC)
    return moment.time()


def apply_then(decision: Decision, then: RuleThen, policy: Policy, label: str) -> Decision:
    if then.route is not None:
        decision = decision.on_route(policy, then.route)
    caps = [c for c in (decision.max_cost_set, then.max_cost_usd) if c is not None]
    only = decision.only_providers
    if then.only_providers is not None:
        only = (*only, (frozenset(then.only_providers), label))
    return replace(
        decision,
        task_class_set=then.task_class or decision.task_class_set,
        min_quality_set=then.min_quality
        if then.min_quality is not None
        else decision.min_quality_set,
        max_cost_set=min(caps) if caps else None,
        include_models=(
            *decision.include_models,
            *(canonical_model(policy, m) or m for m in then.include_models),
        ),
        excluded_models=(
            *decision.excluded_models,
            *((canonical_model(policy, m) or m, label) for m in then.exclude_models),
        ),
        only_providers=only,
        excluded_providers=(
            *decision.excluded_providers,
            *((p, label) for p in then.exclude_providers),
        ),
    )
