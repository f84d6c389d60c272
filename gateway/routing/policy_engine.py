"""The plan: request features + policy + tenant state + live stats -> ordered candidates.

Pure and deterministic: no I/O, no clock (the caller passes `now`), no randomness beyond
the `seed` the features carry. The decision is built in this order:

1. the route: the `x-gateway-route` override (tenants allowed only), else the request's
   `model`; a concrete model name or alias is a route of one, served as asked (no quality
   floor, no cost cap);
2. budget downgrade: above a budget's `downgrade_fraction`, its `downgrade_route`;
3. rules, in order (`last: true` stops them);
4. the `x-gateway-min-quality` / `x-gateway-max-cost-usd` overrides (tenants allowed only);
   cost caps combine (every cap holds), a quality floor is replaced.

Then every deployment of the route's pool (plus models rules include) and of its
fallbacks is screened: rule exclusions, capabilities the request needs, max output,
context window, quality floor for the task class, provider filters, cost cap. What passes
is ordered by the strategy; the fallbacks follow in their listed order.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

import msgspec
from msgspec.structs import replace

from gateway.errors import InvalidRequest
from gateway.routing.budget import apply_budget_downgrade
from gateway.routing.candidates import Candidate, DeploymentRef, Dropped, Plan
from gateway.routing.costing import expected_cost, expected_output_tokens, usd
from gateway.routing.decision import Decision, canonical_model, start
from gateway.routing.features import ROUTE_HEADER, RequestFeatures, Seed
from gateway.routing.quality_target import (
    Keeping,
    MeasuredChoice,
    Refinement,
    choose_measured,
    guard,
    kind_of,
)
from gateway.routing.rules import apply_rules
from gateway.routing.state import LiveStats, TenantState
from gateway.routing.strategies import (
    Eligible,
    LearnedRanking,
    Ranking,
    plan_reason,
    rank,
    weighted_order,
)
from gateway.settings.catalog import DeploymentSettings, ModelSettings
from gateway.settings.policy import Policy


def plan(
    features: RequestFeatures,
    policy: Policy,
    tenant_state: TenantState,
    live_stats: LiveStats,
    now: datetime,
) -> Plan:
    """Raises NotFound for an unknown model or route, InvalidRequest (code
    `context_length_exceeded`) when the prompt fits no candidate's context window, and
    InvalidRequest (code `no_eligible_model`) when every candidate was dropped."""
    decision = decide(features, policy, tenant_state, now)
    pool = _unique([*decision.route.models, *decision.include_models], policy)
    fallbacks = [m for m in _unique(decision.route.fallbacks, policy) if m not in pool]
    seed = features.draw_seed(sticky=decision.route.sticky)  # (hashed by the first draw)
    median = live_stats.median_output_tokens.get(decision.route_name)

    primary: list[Eligible] = []
    backup: list[Eligible] = []
    dropped: list[Dropped] = []
    for index, name in enumerate([*pool, *fallbacks]):
        screen = _Screen(features, decision, live_stats, seed, median, index)
        kept, lost = screen.model(name, policy.models[name])
        (primary if index < len(pool) else backup).extend(kept)
        dropped.extend(lost)

    keeping = _keeping(decision, features, live_stats, policy)
    # positional, in field order, here and in the structs below (msgspec matches a keyword
    # argument for ~500 instructions); tests/routing/test_planner.py pins the orders
    ranking = Ranking(
        decision.route.strategy,  # strategy
        decision.min_quality,  # min_quality
        decision.max_cost_usd,  # max_cost_usd
        _weights(decision, pool, policy),  # weights
        seed,  # seed
        decision.route.sticky,  # sticky
        decision.concrete,  # concrete
        _learned_ranking(decision, features, policy),  # learned
        _measured_choice(decision, features, keeping, primary, policy),  # measured
    )
    ordered = rank(primary, ranking)
    reason = plan_reason(ranking, decision.downgraded)
    status = ranking.measured.status if ranking.measured is not None else None
    if keeping is not None and ranking.measured is None and ordered:
        # a learned route keeping a target: the live measurement may move it to the reference
        guarded = guard(ordered[0][0].model, keeping, seed.value)
        status = guarded.status
        reason = f"{reason}+{guarded.reason()}"
        if guarded.to_reference:
            ordered = _reference_first(ordered, keeping.reference, guarded.reason())
    ranked: list[Candidate] = []
    for e, why in ordered:
        ranked.append(_candidate(e, why, fallback=False))
    if backup:
        for e in sorted(backup, key=lambda e: (e.pool_index, e.deployment_rank)):
            ranked.append(_candidate(e, f"fallback {e.pool_index - len(pool) + 1}", fallback=True))
    if not ranked:
        raise _nothing_eligible(features, decision, policy, [*pool, *fallbacks], dropped)
    return Plan(
        features.requested,  # requested
        decision.route_name,  # route
        decision.route.strategy,  # strategy
        decision.task_class,  # task_class
        decision.min_quality,  # min_quality
        decision.max_cost_usd,  # max_cost_usd
        reason,  # reason
        tuple(ranked),  # candidates
        tuple(dropped),  # dropped
        features.prompt_tokens,  # prompt_tokens
        decision.rules,  # rules
        decision.notes,  # notes
        *_learned_fields(ranking.learned, ranked[0].model),  # learned_score .. _predicted
        status,  # quality_status
        keeping.kind if keeping is not None else None,  # request_kind
    )


def decide(
    features: RequestFeatures, policy: Policy, tenant_state: TenantState, now: datetime
) -> Decision:
    """The route and the constraints on it, before any candidate is looked at."""
    allowed = overrides_allowed(policy, features.tenant)
    overrides = features.overrides
    if overrides.route is not None and allowed:
        decision = start(policy, overrides.route, param=ROUTE_HEADER)
    else:
        decision = start(policy, features.requested)
    decision = apply_budget_downgrade(decision, policy, features, tenant_state)
    decision = apply_rules(decision, policy, features, tenant_state, now)
    if not overrides:
        return decision
    if not allowed:
        return decision.noted(
            f"override headers ignored: tenant {features.tenant} has allow_overrides off"
        )
    if overrides.min_quality is not None:
        decision = replace(decision, min_quality_set=overrides.min_quality)
    if overrides.max_cost_usd is not None:
        caps = [c for c in (decision.max_cost_set, overrides.max_cost_usd) if c is not None]
        decision = replace(decision, max_cost_set=min(caps))
    return decision


def overrides_allowed(policy: Policy, tenant: str | None) -> bool:
    """Tenants opt in with `allow_overrides`; without tenancy (no tenant) they are allowed."""
    if tenant is None:
        return True
    settings = policy.tenants.get(tenant)
    return settings is not None and settings.allow_overrides


def deployment_ref(deployment: DeploymentSettings) -> DeploymentRef:
    return DeploymentRef(
        provider=deployment.provider, upstream_model=deployment.upstream_model, id=deployment.key
    )


class _Screen(msgspec.Struct, frozen=True):
    """Screens the deployments of one model against the decision's constraints."""

    features: RequestFeatures
    decision: Decision
    live_stats: LiveStats
    seed: Seed
    median: int | None
    pool_index: int

    def model(self, name: str, model: ModelSettings) -> tuple[list[Eligible], list[Dropped]]:
        quality = model.quality.get(self.decision.task_class)
        reason = self._model_problem(name, model, quality)
        if reason is not None:
            return [], [Dropped(name, None, reason, quality=quality)]
        output = expected_output_tokens(
            model, self.decision.route, self.features.max_tokens, self.median
        )
        kept: list[Eligible] = []
        lost: list[Dropped] = []
        for rank_index, deployment in self._deployments_in_order(model):
            ref = deployment_ref(deployment)
            cost = expected_cost(model.prices_on(deployment), self.features.prompt_tokens, output)
            problem = self.decision.provider_exclusion(ref.provider)
            cap = self.decision.max_cost_usd
            if problem is None and cap is not None and cost > cap:
                problem = f"expected cost {usd(cost)} above cap {usd(cap)}"
            if problem is not None:
                lost.append(Dropped(name, ref, problem, cost, quality))
                continue
            kept.append(
                Eligible(  # (positional, in field order: see Ranking in `plan`)
                    name,  # model
                    ref,  # deployment
                    cost,  # cost
                    output,  # output_tokens
                    quality,  # quality
                    self.pool_index,  # pool_index
                    rank_index,  # deployment_rank
                    self.live_stats.ttft_ewma_ms.get(ref.id),  # ttft_ms
                )
            )
        return kept, lost

    def _model_problem(self, name: str, model: ModelSettings, quality: float | None) -> str | None:
        features = self.features
        excluded = self.decision.model_exclusion(name)
        if excluded is not None:
            return excluded
        needed = features.required_capabilities
        if needed:  # (most requests need none: no set built per model)
            missing = sorted(needed - set(model.capabilities))
            if missing:
                return "lacks " + ", ".join(missing)
        over = features.max_tokens is not None and features.max_tokens > model.max_output_tokens
        if over and self.decision.route.max_tokens_over_limit == "refuse":
            return (
                f"max_tokens {features.max_tokens} above its max output {model.max_output_tokens}"
            )
        if not fits_context(features, model):
            return f"context window {model.context_window} too small for {_tokens_needed(features)}"
        floor = self.decision.min_quality
        if floor is None:
            return None
        task = self.decision.task_class
        if quality is None:
            return f"no quality score for task class {task}"
        if quality < floor:
            return f"quality {quality:.2f} below floor {floor:g} for {task}"
        return None

    def _deployments_in_order(
        self, model: ModelSettings
    ) -> Iterator[tuple[int, DeploymentSettings]]:
        if len(model.deployments) == 1:  # most models: nothing to order
            yield 0, model.deployments[0]
            return
        # keyed by position too, so two deployments sharing an id still both appear
        keyed = {f"{deployment_ref(d).id}#{i}": d for i, d in enumerate(model.deployments)}
        order = weighted_order([(key, d.weight) for key, d in keyed.items()], self.seed.value)
        for rank_index, key in enumerate(order):
            yield rank_index, keyed[key]


def fits_context(features: RequestFeatures, model: ModelSettings) -> bool:
    """The prompt and the output it may get (a cap above the model's maximum output is
    served clamped, see pipeline/output_clamp) fit the model's context window."""
    output = min(features.max_tokens or 0, model.max_output_tokens)
    return features.prompt_tokens + output <= model.context_window


def _tokens_needed(features: RequestFeatures) -> str:
    needed = f"{features.prompt_tokens} prompt tokens"
    if features.max_tokens:
        needed += f" + max_tokens {features.max_tokens}"
    return needed


def _unique(names: list[str], policy: Policy) -> list[str]:
    """Catalog names in first-seen order; aliases resolved, duplicates removed."""
    out: list[str] = []
    for name in names:
        canonical = canonical_model(policy, name)
        if canonical is not None and canonical not in out:
            out.append(canonical)
    return out


def _weights(decision: Decision, pool: list[str], policy: Policy) -> dict[str, float]:
    """Each pool model's traffic share; models a rule added get none of their own."""
    shares = dict.fromkeys(pool, 0.0)
    weights = decision.route.weights
    for i, name in enumerate(decision.route.models):
        canonical = canonical_model(policy, name)
        if canonical in shares:
            shares[canonical] = weights[i] if weights is not None and i < len(weights) else 1.0
    return shares


def _learned_ranking(
    decision: Decision, features: RequestFeatures, policy: Policy
) -> LearnedRanking | None:
    settings = decision.route.learned
    if decision.concrete or decision.route.strategy != "learned" or settings is None:
        return None
    score = features.strong_score
    predicted = {} if score is None else score.predicted
    return LearnedRanking(
        strong=frozenset(_unique(settings.strong, policy)),
        cheap=frozenset(_unique(settings.cheap, policy)),
        threshold=(
            score.threshold
            if score is not None and score.threshold is not None
            else settings.threshold
        ),
        score=score,
        fallback=settings.fallback_strategy,
        choice=settings.choice,
        target=settings.target,
        predicted={
            canonical: quality
            for model, quality in predicted.items()
            if (canonical := canonical_model(policy, model)) is not None
        },
    )


def _keeping(
    decision: Decision, features: RequestFeatures, live_stats: LiveStats, policy: Policy
) -> Keeping | None:
    route = decision.route
    if decision.concrete or route.quality_target is None or route.reference is None:
        return None
    reference = canonical_model(policy, route.reference) or route.reference
    return Keeping(
        route=decision.route_name,
        target=route.quality_target,
        reference=reference,
        kind=kind_of(features.request_kind),
        unmeasured=route.unmeasured,
        measured=live_stats.measured_quality,
    )


def _measured_choice(
    decision: Decision,
    features: RequestFeatures,
    keeping: Keeping | None,
    primary: list[Eligible],
    policy: Policy,
) -> MeasuredChoice | None:
    if keeping is None or decision.route.strategy != "measured":
        return None
    cheapest: dict[str, tuple[Decimal, int, int]] = {}
    for e in primary:
        key = (e.cost, e.pool_index, e.deployment_rank)
        if e.model not in cheapest or key < cheapest[e.model]:
            cheapest[e.model] = key
    by_cost = sorted(cheapest, key=cheapest.__getitem__)
    return choose_measured(by_cost, keeping, _refinement(decision, features, keeping, policy))


def _refinement(
    decision: Decision, features: RequestFeatures, keeping: Keeping, policy: Policy
) -> Refinement | None:
    learned = decision.route.learned
    score = features.strong_score
    if learned is None or score is None or score.score is None:
        return None
    threshold = learned.kinds.get(keeping.kind)
    if threshold is None:
        return None
    return Refinement(score.score, threshold, frozenset(_unique(learned.cheap, policy)))


def _reference_first(
    ordered: list[tuple[Eligible, str]], reference: str, why: str
) -> list[tuple[Eligible, str]]:
    first = [(e, f"quality target: {why}") for e, _ in ordered if e.model == reference]
    return [*first, *((e, r) for e, r in ordered if e.model != reference)]


# Plan's learned_score, learned_threshold, learned_tier, learned_scorer, learned_target
# and learned_predicted, in field order
_LearnedFields = tuple[
    float | None, float | None, str | None, str | None, float | None, tuple[tuple[str, float], ...]
]
_NOT_LEARNED: _LearnedFields = (None, None, None, None, None, ())


def _learned_fields(learned: LearnedRanking | None, first_model: str) -> _LearnedFields:
    if learned is None:
        return _NOT_LEARNED
    score = learned.score
    tier: str | None = learned.tier
    if learned.choice == "cheapest_above" and learned.problem is None:
        tier = learned.tier_of(first_model)
    return (
        score.score if score is not None else None,
        learned.threshold,
        tier,
        score.scorer if score is not None else None,
        learned.target,
        tuple(learned.predicted.items()),
    )


def _candidate(entry: Eligible, reason: str, *, fallback: bool) -> Candidate:
    return Candidate(  # (positional, in field order: see Ranking in `plan`)
        entry.model,  # model
        entry.deployment,  # deployment
        entry.cost,  # expected_cost_usd
        entry.output_tokens,  # expected_output_tokens
        entry.quality,  # quality
        reason,  # reason
        fallback,  # fallback
    )


def _nothing_eligible(
    features: RequestFeatures,
    decision: Decision,
    policy: Policy,
    considered: list[str],
    dropped: list[Dropped],
) -> InvalidRequest:
    models = [(name, policy.models[name]) for name in considered]
    if models and not any(fits_context(features, m) for _, m in models):
        largest_name, largest = max(models, key=lambda item: item[1].context_window)
        return InvalidRequest(
            f"This request needs {_tokens_needed(features)}, more than the largest context "
            f"window of route '{decision.route_name}': {largest.context_window} tokens "
            f"({largest_name}). Shorten the messages or lower max_tokens.",
            param="messages",
            code="context_length_exceeded",
        )
    reasons = "; ".join(
        f"{d.model}{'@' + d.deployment.id if d.deployment else ''}: {d.reason}" for d in dropped
    )
    return InvalidRequest(
        f"No model of route '{decision.route_name}' can serve this request: {reasons}.",
        param="model",
        code="no_eligible_model",
    )
