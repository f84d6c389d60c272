"""Which answered requests are evaluated, and with what: a tenant's `evaluation:` block
(its opt-in) over its route's, resolved once per (tenant, route) and policy."""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal

from gateway.settings.evaluation import (
    DEFAULT_DAILY_USD,
    DEFAULT_MAX_TOKENS,
    DEFAULT_SAMPLE_RATE,
    EvaluationSettings,
)
from gateway.settings.policy import Policy


@dataclass(frozen=True, slots=True)
class EvaluationPlan:
    """What a (tenant, route)'s answers are evaluated with. `reference` is "" when
    neither block names one: the tenant's requests are then noted (feedback can name
    them) but none is judged."""

    sample_rate: float
    reference: str
    judge: str
    daily_usd: Decimal
    # the tenant the evaluation calls are charged to ("": the evaluated request's)
    charge_to: str
    max_tokens: int

    @property
    def judging(self) -> bool:
        return bool(self.reference and self.judge) and self.sample_rate > 0

    def sampled(self, draw: float) -> bool:
        """`draw` uniform in [0, 1): True for a `sample_rate` share of requests."""
        return self.judging and draw < self.sample_rate


def resolve(
    tenant: EvaluationSettings | None, route: EvaluationSettings | None
) -> EvaluationPlan | None:
    """The plan for a tenant's block over a route's; None when the tenant has not opted in."""
    if tenant is None:
        return None

    def pick(name: str) -> object:
        own = getattr(tenant, name)
        return own if own is not None or route is None else getattr(route, name)

    rate = pick("sample_rate")
    daily = pick("daily_usd")
    tokens = pick("max_tokens")
    return EvaluationPlan(
        sample_rate=DEFAULT_SAMPLE_RATE if rate is None else float(rate),  # type: ignore[arg-type]
        reference=str(pick("reference") or ""),
        judge=str(pick("judge") or ""),
        daily_usd=DEFAULT_DAILY_USD if daily is None else Decimal(str(daily)),
        charge_to=str(pick("charge_to") or ""),
        max_tokens=DEFAULT_MAX_TOKENS if tokens is None else int(tokens),  # type: ignore[call-overload]
    )


class PlanBook:
    """Plans by (tenant, route) for one policy, resolved on first use; `random` draws
    the samples (seeded in tests)."""

    def __init__(self, policy: Policy, draws: random.Random | None = None) -> None:
        self.policy = policy
        self.any_tenant = any(t.evaluation is not None for t in policy.tenants.values())
        self._plans: dict[tuple[str, str], EvaluationPlan | None] = {}
        self._draws = draws or random.Random()

    def plan(self, tenant: str, route: str) -> EvaluationPlan | None:
        key = (tenant, route)
        try:
            return self._plans[key]
        except KeyError:
            pass
        tenant_settings = self.policy.tenants.get(tenant)
        route_settings = self.policy.routes.get(route)
        found = resolve(
            tenant_settings.evaluation if tenant_settings is not None else None,
            route_settings.evaluation if route_settings is not None else None,
        )
        if len(self._plans) > 10_000:  # tenants x routes are configured: never this many
            self._plans.clear()
        self._plans[key] = found
        return found

    def draw(self) -> float:
        return self._draws.random()
