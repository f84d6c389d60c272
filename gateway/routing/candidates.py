"""The planner's answer: ordered candidates, and the models it left out and why."""

from __future__ import annotations

from decimal import Decimal

import msgspec

from gateway.settings.routes import Strategy


class DeploymentRef(msgspec.Struct, frozen=True):
    provider: str
    upstream_model: str
    # unique within the model; keys live stats (TTFT EWMA) and breakers
    id: str


class Candidate(msgspec.Struct, frozen=True):
    # the catalog name of the model (an alias the client used is resolved)
    model: str
    deployment: DeploymentRef
    expected_cost_usd: Decimal
    expected_output_tokens: int
    quality: float | None
    reason: str
    # True when it comes from the route's `fallbacks`, after the strategy's own choices
    fallback: bool = False


class Dropped(msgspec.Struct, frozen=True):
    model: str
    # None when the whole model was dropped (every deployment)
    deployment: DeploymentRef | None
    reason: str
    expected_cost_usd: Decimal | None = None
    quality: float | None = None


class Plan(msgspec.Struct, frozen=True):
    requested: str
    route: str
    strategy: Strategy
    task_class: str
    min_quality: float | None
    max_cost_usd: Decimal | None
    # short and header-safe, e.g. `cheapest-meeting-0.8`
    reason: str
    candidates: tuple[Candidate, ...]
    dropped: tuple[Dropped, ...]
    prompt_tokens: int
    # labels of the rules that matched, in evaluation order
    rules: tuple[str, ...] = ()
    # budget downgrades, ignored overrides and the like, for explain and logs
    notes: tuple[str, ...] = ()
    # `learned` routes: the score (P(strong tier needed)), the threshold it was compared
    # with, the tier it chose (None without a score) and the scorer's name
    learned_score: float | None = None
    learned_threshold: float | None = None
    learned_tier: str | None = None
    learned_scorer: str | None = None
    # `cheapest_above` routes: the quality target and each model's predicted quality
    learned_target: float | None = None
    learned_predicted: tuple[tuple[str, float], ...] = ()
    # routes with a quality_target: what the route could say of this request's quality
    # (`measured`, `unmeasured`, `below-target`, `reference`) and the kind it looked up
    quality_status: str | None = None
    request_kind: str | None = None

    def route_header(self) -> str:
        """`x-gateway-route` before dispatch; the dispatcher appends served/fallback-from."""
        return f"{self.route}; reason={self.reason}"
