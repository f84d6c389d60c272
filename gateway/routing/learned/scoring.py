"""Which requests need a learned score, what text is scored, and the loaded scorers.

Pure apart from `load_scorers`, which reads the weights files once (at startup and on a
policy reload), never per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from msgspec.structs import replace

from gateway.errors import GatewayError
from gateway.routing.features import RequestFeatures, StrongScore
from gateway.routing.learned.quality import QualityHeads, load_heads
from gateway.routing.learned.weights import (
    Scorer,
    WeightsError,
    calibrated_threshold,
    load_scorer,
    versioned_route,
)
from gateway.routing.policy_engine import decide
from gateway.routing.state import TenantState
from gateway.settings.policy import Policy
from gateway.settings.routes import LearnedSettings
from gateway.wire.openai import ChatRequest


@dataclass(frozen=True)
class LearnedTarget:
    """The learned route a request will be planned on."""

    route: str
    settings: LearnedSettings


def may_land_on_learned(features: RequestFeatures, policy: Policy) -> bool:
    """A cheap pre-check before the full decision: the request names a learned route,
    or a rule or a budget downgrade could move it onto one."""
    # what depends on the policy alone is worked out once per policy (Policy's cached
    # properties), not per request
    learned = policy.learned_routes
    if not learned:
        return False
    if features.requested in learned or features.overrides.route in learned:
        return True
    return policy.learned_reachable


def learned_target(
    features: RequestFeatures, policy: Policy, tenant_state: TenantState, now: datetime
) -> LearnedTarget | None:
    """The learned route this request lands on after overrides, budget downgrades and
    rules, or None (every other route skips scoring). A request the planner will refuse
    (unknown model) needs no score: the planner raises the error itself."""
    if not may_land_on_learned(features, policy):
        return None
    try:
        decision = decide(features, policy, tenant_state, now)
    except GatewayError:
        return None
    settings = decision.route.learned
    if decision.concrete or settings is None:
        return None
    return LearnedTarget(decision.route_name, settings)


def scoring_text(request: ChatRequest) -> str:
    """The text a router scores: the last user message (RouteLLM scores the user's
    prompt; the scorer reads only its head and tail)."""
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text()
    return ""


def with_score(features: RequestFeatures, score: StrongScore) -> RequestFeatures:
    return replace(features, strong_score=score)


def predicted_qualities(
    settings: LearnedSettings, score: float, heads: QualityHeads | None
) -> dict[str, float]:
    """Each stand-in route model's predicted quality (empty for two-tier routes, or when
    the heads did not load: the route then falls back in cost order)."""
    if settings.choice != "cheapest_above" or heads is None:
        return {}
    out: dict[str, float] = {}
    for model, judged in settings.stand_ins.items():
        predicted = heads.predict(judged, score)
        if predicted is not None:
            out[model] = predicted
    return out


@dataclass(frozen=True)
class ScorerSet:
    """The scorers and quality heads a policy's learned routes name, loaded once; a file
    that failed to load is kept as its error so the route degrades instead of the gateway
    failing."""

    loaded: dict[str, Scorer]
    failed: dict[str, WeightsError]
    heads: dict[str, QualityHeads] = field(default_factory=dict)

    def get(self, name: str) -> Scorer | None:
        return self.loaded.get(name)

    def scored(self, settings: LearnedSettings, value: float) -> StrongScore:
        """A computed score, with the route's predicted qualities when it has any."""
        heads = self.heads.get(settings.quality)
        threshold = None
        if versioned_route(settings.scorer) is not None:
            scorer = self.loaded.get(settings.scorer)
            threshold = calibrated_threshold(scorer) if scorer is not None else None
        return StrongScore(
            settings.scorer,
            value,
            predicted=predicted_qualities(settings, value, heads),
            threshold=threshold,
        )

    def score(self, settings: LearnedSettings, text: str) -> StrongScore:
        """Synchronously (the CLI, explain); the gateway runs `Scorer.score` in
        its worker pool instead."""
        scorer = self.loaded.get(settings.scorer)
        if scorer is None:
            return StrongScore(settings.scorer, None, "unavailable")
        return self.scored(settings, scorer.score(text))


def load_scorers(policy: Policy) -> ScorerSet:
    loaded: dict[str, Scorer] = {}
    failed: dict[str, WeightsError] = {}
    heads: dict[str, QualityHeads] = {}
    for route_name, route in policy.routes.items():
        if route.learned is None:
            continue
        name = route.learned.scorer
        # a versioned scorer comes from Redis as it is promoted (pipeline/scorer_watch.py)
        if versioned_route(name) is None and name not in loaded and name not in failed:
            try:
                loaded[name] = load_scorer(name)
            except WeightsError as exc:
                failed[name] = exc
        if route.learned.choice == "cheapest_above":
            quality = route.learned.quality
            if quality not in heads and quality not in failed:
                try:
                    heads[quality] = load_heads(quality)
                except WeightsError as exc:
                    failed[quality] = exc
            if quality in heads:
                for key, problem in stand_in_problems(route_name, route.learned, heads[quality]):
                    failed[key] = WeightsError(problem)
    return ScorerSet(loaded, failed, heads)


def stand_in_problems(
    route: str, settings: LearnedSettings, heads: QualityHeads
) -> list[tuple[str, str]]:
    """Stand-ins the heads file does not know (those models then get no prediction and
    follow the ones that do, by cost), as (config key, message)."""
    out: list[tuple[str, str]] = []
    known = ", ".join(sorted(heads.heads))
    for model, judged in settings.stand_ins.items():
        if judged not in heads.heads:
            key = f"routes.{route}.learned.stand_ins.{model}"
            out.append((key, f"{key}: '{judged}' is not a model {heads.name} predicts ({known})"))
    return out


def attach_score_now(
    features: RequestFeatures,
    request: ChatRequest,
    policy: Policy,
    tenant_state: TenantState,
    now: datetime,
    scorers: ScorerSet,
) -> RequestFeatures:
    """Score in this thread when the request lands on a learned route (CLI, explain)."""
    target = learned_target(features, policy, tenant_state, now)
    if target is None:
        return features
    return with_score(features, scorers.score(target.settings, scoring_text(request)))
