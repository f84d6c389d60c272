"""The changing inputs of a plan, gathered by the caller so the planner stays pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.routing.measured import MeasuredQuality


@dataclass(frozen=True)
class TenantState:
    """The tenant's spend so far: the highest used fraction among its (and its key's)
    budgets for the current period, 0.0 when it has none."""

    budget_used_fraction: float = 0.0


@dataclass(frozen=True)
class LiveStats:
    """What recent traffic says, fed back by the dispatcher.

    `ttft_ewma_ms` is keyed by deployment id (`Candidate.deployment.id`);
    `median_output_tokens` by route name (the route a request was planned on).
    `measured_quality` (routes with a `quality_target`) is keyed by (route, served
    model's catalog name, request kind or `measured.ALL_KINDS`): the evaluation room's
    latest measurement against the route's reference; a key that is absent is unmeasured.
    """

    ttft_ewma_ms: Mapping[str, float] = field(default_factory=dict)
    median_output_tokens: Mapping[str, int] = field(default_factory=dict)
    measured_quality: Mapping[tuple[str, str, str], MeasuredQuality] = field(default_factory=dict)
