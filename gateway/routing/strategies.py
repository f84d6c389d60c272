"""How each strategy orders the deployments that passed screening.

Every ordering is total (ties broken by pool position, then the seeded deployment rank)
so the same inputs always give the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Literal

import msgspec
from msgspec.structs import replace

from gateway.routing.candidates import DeploymentRef
from gateway.routing.costing import usd
from gateway.routing.features import Seed, StrongScore, stable_hash
from gateway.routing.quality_target import MeasuredChoice
from gateway.settings.routes import FallbackStrategy, LearnedChoice, Strategy

Tier = Literal["strong", "cheap"]

_TWO_TO_64 = float(2**64)


class Eligible(msgspec.Struct, frozen=True):
    """A deployment that passed every constraint, with what the strategies rank it by."""

    model: str
    deployment: DeploymentRef
    cost: Decimal
    output_tokens: int
    quality: float | None
    pool_index: int
    deployment_rank: int
    ttft_ms: float | None


class LearnedRanking(msgspec.Struct, frozen=True):
    """The `learned` strategy's inputs: the tiers (canonical model names), the route's
    choice (`two_tier` by `threshold`, or `cheapest_above` a quality `target`), the
    request's score (None when scoring was never attempted) and, for cheapest_above,
    each canonical model's predicted quality."""

    strong: frozenset[str]
    cheap: frozenset[str]
    threshold: float | None
    score: StrongScore | None
    fallback: FallbackStrategy
    choice: LearnedChoice = "two_tier"
    target: float | None = None
    predicted: dict[str, float] = msgspec.field(default_factory=dict)

    @property
    def problem(self) -> str | None:
        """Why there is no score to route on (`not-scored`, `saturated`, ...), or None."""
        if self.score is None:
            return "not-scored"
        if self.score.score is None:
            return self.score.problem or "unavailable"
        return None

    @property
    def tier(self) -> Tier | None:
        """The two-tier choice; None without a score (and for cheapest_above routes, whose
        tier is the chosen model's: `tier_of`)."""
        if self.score is None or self.score.score is None or self.threshold is None:
            return None
        return "strong" if self.score.score >= self.threshold else "cheap"

    def tier_of(self, model: str) -> str:
        if model in self.strong:
            return "strong"
        return "cheap" if model in self.cheap else "rule-added"


class Ranking(msgspec.Struct, frozen=True):
    strategy: Strategy
    min_quality: float | None
    max_cost_usd: Decimal | None
    # weighted: traffic share per pool model (0 for models a rule added)
    weights: dict[str, float]
    seed: Seed
    sticky: bool
    concrete: bool
    learned: LearnedRanking | None = None
    # strategy `measured`: the model chosen for the request's kind (quality_target.py)
    measured: MeasuredChoice | None = None


def weighted_order(weights: Sequence[tuple[str, float]], seed: int) -> list[str]:
    """Weighted sampling without replacement, deterministic in `seed` (Efraimidis-Spirakis
    keys over rendezvous hashes): the first name is drawn with probability weight/total,
    and removing a name never reshuffles the others' relative order."""

    def key(item: tuple[int, tuple[str, float]]) -> tuple[float, int]:
        index, (name, weight) = item
        if weight <= 0:
            return (math.inf, index)
        uniform = (stable_hash(f"{seed}:{name}") + 0.5) / _TWO_TO_64
        return (-math.log(uniform) / weight, index)

    return [name for _, (name, _) in sorted(enumerate(weights), key=key)]


def rank(entries: Sequence[Eligible], ranking: Ranking) -> list[tuple[Eligible, str]]:
    """Entries in serving order, each with the reason for its place."""
    if ranking.concrete:
        if len(entries) == 1:  # a model with one deployment: nothing to sort
            return [(entries[0], "requested by name")]
        ordered = sorted(entries, key=lambda e: (e.pool_index, e.deployment_rank))
        return [(e, "requested by name") for e in ordered]
    key, why = _ORDERINGS[ranking.strategy](ranking)
    ordered = sorted(entries, key=key)
    return [(e, why(e)) for e in ordered]


_Key = Callable[[Eligible], tuple[object, ...]]
_Why = Callable[[Eligible], str]


def _cheapest(ranking: Ranking) -> tuple[_Key, _Why]:
    floor = ranking.min_quality

    def why(e: Eligible) -> str:
        meets = f", quality {e.quality:.2f} >= {floor:g}" if floor is not None else ""
        return f"cheapest: {usd(e.cost)}{meets}"

    return (lambda e: (e.cost, -(e.quality or 0.0), e.pool_index, e.deployment_rank)), why


def _quality(ranking: Ranking) -> tuple[_Key, _Why]:
    cap = ranking.max_cost_usd

    def why(e: Eligible) -> str:
        score = "no score" if e.quality is None else f"{e.quality:.2f}"
        within = f", {usd(e.cost)} <= cap {usd(cap)}" if cap is not None else ""
        return f"best quality: {score}{within}"

    def key(e: Eligible) -> tuple[object, ...]:
        return (e.quality is None, -(e.quality or 0.0), e.cost, e.pool_index, e.deployment_rank)

    return key, why


def _latency(ranking: Ranking) -> tuple[_Key, _Why]:
    def why(e: Eligible) -> str:
        if e.ttft_ms is None:
            return f"no TTFT measured yet (ranked after measured ones, by cost {usd(e.cost)})"
        return f"lowest TTFT: {e.ttft_ms:.0f} ms EWMA"

    def key(e: Eligible) -> tuple[object, ...]:
        measured = e.ttft_ms is not None
        return (not measured, e.ttft_ms or 0.0, e.cost, e.pool_index, e.deployment_rank)

    return key, why


def _ordered(ranking: Ranking) -> tuple[_Key, _Why]:
    return (lambda e: (e.pool_index, e.deployment_rank)), (
        lambda e: f"priority {e.pool_index + 1} in the route"
    )


def _weighted(ranking: Ranking) -> tuple[_Key, _Why]:
    order = weighted_order(list(ranking.weights.items()), ranking.seed.value)
    position = {name: i for i, name in enumerate(order)}
    total = sum(ranking.weights.values())
    sticky = " (sticky per user)" if ranking.sticky else ""

    def why(e: Eligible) -> str:
        weight = ranking.weights.get(e.model, 0.0)
        return f"weighted draw: weight {weight:g} of {total:g}{sticky}"

    def key(e: Eligible) -> tuple[object, ...]:
        return (position.get(e.model, len(position)), e.pool_index, e.deployment_rank)

    return key, why


def _learned(ranking: Ranking) -> tuple[_Key, _Why]:
    learned = ranking.learned
    assert learned is not None, "the planner builds LearnedRanking for learned routes"
    if learned.problem is not None or learned.score is None or learned.score.score is None:
        fallback_key, fallback_why = _ORDERINGS[learned.fallback](ranking)
        problem = learned.problem
        return fallback_key, lambda e: f"no learned score ({problem}), {fallback_why(e)}"
    if learned.choice == "cheapest_above":
        return _cheapest_above(learned)
    tier = learned.tier
    assert tier is not None, "two_tier routes have a threshold"
    score, threshold = learned.score.score, learned.threshold
    first = learned.strong if tier == "strong" else learned.cheap
    compare = ">=" if tier == "strong" else "<"

    def why(e: Eligible) -> str:
        return (
            f"learned: score {score:.3f} {compare} threshold {threshold:.3f} -> {tier} tier; "
            f"{learned.tier_of(e.model)} model, {usd(e.cost)}"
        )

    def key(e: Eligible) -> tuple[object, ...]:
        return (e.model not in first, e.cost, -(e.quality or 0.0), e.pool_index, e.deployment_rank)

    return key, why


def _cheapest_above(learned: LearnedRanking) -> tuple[_Key, _Why]:
    """The models whose predicted quality reaches the target, cheapest first; then the
    ones below it, best predicted first (a route that cannot meet its target serves the
    nearest miss); then those without a prediction, by cost. Every model stays in the
    plan, so a failed upstream still falls back."""
    target = learned.target or 0.0

    def why(e: Eligible) -> str:
        predicted = learned.predicted.get(e.model)
        if predicted is None:
            quality = "no predicted quality (no stand-in)"
        else:
            compare = ">=" if predicted >= target else "<"
            quality = f"predicted quality {predicted:.3f} {compare} target {target:.3f}"
        return f"learned: {quality}; {learned.tier_of(e.model)} model, {usd(e.cost)}"

    def key(e: Eligible) -> tuple[object, ...]:
        predicted = learned.predicted.get(e.model)
        if predicted is None:
            group, nearness = 2, 0.0
        elif predicted >= target:
            group, nearness = 0, 0.0
        else:
            group, nearness = 1, -predicted
        return (group, nearness, e.cost, e.pool_index, e.deployment_rank)

    return key, why


def _measured(ranking: Ranking) -> tuple[_Key, _Why]:
    """The model measured to keep the target on this kind leads; the rest follow by cost,
    so a failed upstream still falls back."""
    choice = ranking.measured
    assert choice is not None, "the planner chooses for measured routes"

    def why(e: Eligible) -> str:
        if e.model == choice.model:
            return f"{choice.reason}, {usd(e.cost)}"
        return f"measured: after {choice.model}, by cost {usd(e.cost)}"

    def key(e: Eligible) -> tuple[object, ...]:
        return (e.model != choice.model, e.cost, e.pool_index, e.deployment_rank)

    return key, why


_ORDERINGS: dict[Strategy, Callable[[Ranking], tuple[_Key, _Why]]] = {
    "cheapest": _cheapest,
    "quality": _quality,
    "latency": _latency,
    "ordered": _ordered,
    "weighted": _weighted,
    "learned": _learned,
    "measured": _measured,
}


def plan_reason(ranking: Ranking, downgraded: bool) -> str:
    """The short, header-safe reason: `cheapest-meeting-0.8`, `weighted-sticky`, ..."""
    floor = ranking.min_quality
    meeting = f"-meeting-{floor:g}" if floor is not None else ""
    if ranking.concrete:
        reason = "requested-model"
    elif ranking.strategy == "cheapest":
        reason = f"cheapest{meeting}"
    elif ranking.strategy == "quality":
        cap = ranking.max_cost_usd
        reason = "best-quality" + (f"-under-{cap.normalize():f}usd" if cap is not None else "")
    elif ranking.strategy == "latency":
        reason = f"lowest-ttft{meeting}"
    elif ranking.strategy == "weighted":
        reason = "weighted-sticky" if ranking.sticky else "weighted"
    elif ranking.strategy == "learned" and ranking.learned is not None:
        reason = _learned_reason(ranking, ranking.learned)
    elif ranking.strategy == "measured" and ranking.measured is not None:
        reason = ranking.measured.reason
    else:
        reason = "ordered"
    return f"{reason}+budget-downgrade" if downgraded else reason


def _learned_reason(ranking: Ranking, learned: LearnedRanking) -> str:
    """`learned-strong-score-0.731-threshold-0.412`, or
    `learned-cheapest-above-0.180-score-0.274-predicted-deepseek-v3.2:0.199,...`, or,
    without a score, `learned-saturated+cheapest-meeting-0.8` (the fallback's reason)."""
    if learned.problem is not None or learned.score is None or learned.score.score is None:
        fallback = replace(ranking, strategy=learned.fallback, learned=None)
        return f"learned-{learned.problem}+{plan_reason(fallback, downgraded=False)}"
    score = learned.score.score
    if learned.choice == "cheapest_above":
        predicted = ",".join(f"{m}:{q:.3f}" for m, q in learned.predicted.items())
        return (
            f"learned-cheapest-above-{learned.target or 0.0:.3f}-score-{score:.3f}"
            f"-predicted-{predicted or 'none'}"
        )
    return f"learned-{learned.tier}-score-{score:.3f}-threshold-{learned.threshold or 0.0:.3f}"
