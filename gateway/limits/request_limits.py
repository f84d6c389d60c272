"""Which limits one request touches: a pure function of the settings and the request.

Where each limit comes from (`policies/`):

- `tenants.<t>.keys[].limits` / `.budgets`: per API key.
- `tenants.<t>.limits` / `.budgets`: per tenant, all its keys together.
- `tenants.<t>.model_limits.<model>`, else `models.<model>.limits`: per tenant and
  model. A model's own `limits` is the default every tenant gets on that model; a
  tenant's `model_limits` entry replaces it.
- `models.<model>.deployments[].limits`: per upstream deployment, shared by all tenants,
  to stay under a provider account's own RPM/TPM.

A requests bucket takes 1 per request; a tokens bucket takes the expected tokens
(prompt plus expected output), settled later against real usage. A bucket's capacity is
its `*_burst`, else one minute's worth; it refills at the per-minute rate.
"""

from __future__ import annotations

import calendar
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal

from gateway.limits import redis_keys
from gateway.limits.spec import (
    AdmissionRequest,
    BucketTake,
    BudgetReserve,
    LeaseSpec,
    usd_to_micros,
)
from gateway.settings.catalog import DeploymentSettings, ModelSettings, RateLimitSettings
from gateway.settings.tenants import BudgetSettings, KeySettings, TenantSettings

DEFAULT_LEASE_TTL_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class LimitOwner:
    """One set of limits and where its state lives: a prefix (which fixes the cluster
    slot), a path inside it, and a name for messages."""

    prefix: str
    path: str
    scope: str
    limits: RateLimitSettings | None
    budgets: tuple[BudgetSettings, ...] = ()

    @property
    def limits_anything(self) -> bool:
        limits = self.limits
        return bool(
            self.budgets
            or (
                limits is not None
                and (
                    limits.requests_per_minute or limits.tokens_per_minute or limits.max_concurrent
                )
            )
        )


@dataclass(frozen=True, slots=True)
class LimitScope:
    """Who asks for which model, served where: all that decides which limits apply."""

    tenant_id: str
    tenant: TenantSettings
    key: KeySettings | None
    model_alias: str
    model: ModelSettings
    deployment_id: str | None = None
    deployment: DeploymentSettings | None = None


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What admission needs to know about one request."""

    request_id: str
    tenant_id: str
    tenant: TenantSettings
    key: KeySettings | None
    model_alias: str
    model: ModelSettings
    expected_tokens: int
    worst_case_cost_usd: Decimal
    deployment_id: str | None = None
    deployment: DeploymentSettings | None = None

    @property
    def scope(self) -> LimitScope:
        return LimitScope(
            self.tenant_id,
            self.tenant,
            self.key,
            self.model_alias,
            self.model,
            self.deployment_id,
            self.deployment,
        )


def expected_tokens(prompt_tokens: int, max_tokens: int | None, model: ModelSettings) -> int:
    """Prompt tokens plus the most the reply may produce: what the tokens buckets reserve
    until real usage is known."""
    output = max_tokens or model.default_max_tokens or model.max_output_tokens
    return prompt_tokens + min(output, model.max_output_tokens)


def plan_admission(
    request: RequestLimits,
    *,
    now: datetime,
    key_prefix: str = "gw",
    lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS,
    owners: Sequence[LimitOwner] | None = None,
) -> AdmissionRequest:
    """Every bucket, lease and budget the request touches, tenant-tagged ones first.

    `owners` is `limit_owners(request.scope, key_prefix)`, which a caller may keep: it
    depends only on the settings and the scope. A caller serving many requests of one
    scope keeps an :class:`AdmissionTemplate` instead, which is this function minus the
    work that is the same for every request."""
    if owners is None:
        owners = limit_owners(request.scope, key_prefix)
    template = AdmissionTemplate(owners, lease_ttl_seconds=lease_ttl_seconds)
    return template.build(
        request.request_id,
        expected_tokens=request.expected_tokens,
        worst_case_cost_usd=request.worst_case_cost_usd,
        now=now.timestamp(),
    )


class AdmissionTemplate:
    """The admission of every request from one scope, (tenant, key, model, deployment),
    under one policy, less what each request brings: its id, its expected tokens (the
    tokens buckets' take) and its worst-case cost (every budget's reservation).

    Keys, capacities, leases and budget limits are computed once; calendar budgets' keys
    and ends once per period (the template notices when `now` leaves it). `build` gives
    what :func:`plan_admission` gives for the same inputs, in the same order."""

    __slots__ = (
        "_buckets",
        "_budget_sources",
        "_leases",
        "_period",
        "_takes_tokens",
        "limits_anything",
        "needs_prompt_tokens",
        "owners",
        "reserves_budgets",
        "soft_fraction",
    )

    def __init__(
        self,
        owners: Sequence[LimitOwner],
        *,
        lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS,
    ) -> None:
        self.owners = tuple(owners)
        self.limits_anything = any(owner.limits_anything for owner in self.owners)
        buckets: list[BucketTake] = []
        leases: list[LeaseSpec] = []
        for owner in self.owners:
            # the tokens buckets' amount is each request's own; `build` fills it in
            buckets.extend(bucket_takes(owner, 0))
            if owner.limits and owner.limits.max_concurrent:
                leases.append(
                    LeaseSpec(
                        key=redis_keys.lease_key(owner.prefix, owner.path),
                        limit=owner.limits.max_concurrent,
                        ttl_seconds=lease_ttl_seconds,
                        scope=owner.scope,
                    )
                )
        self._buckets = tuple(buckets)
        self._takes_tokens = any(bucket.kind == "tokens" for bucket in buckets)
        self._leases = tuple(leases)
        self._budget_sources = tuple(
            (owner, budget) for owner in self.owners for budget in owner.budgets
        )
        self.reserves_budgets = bool(self._budget_sources)
        # the tokens buckets take the prompt's tokens, a budget reserves what they cost
        self.needs_prompt_tokens = self._takes_tokens or self.reserves_budgets
        # the lowest `soft_fraction` of the budgets (past it, a warning), None without one
        softs = [b.soft_fraction for _, b in self._budget_sources if b.soft_fraction is not None]
        self.soft_fraction = min(softs) if softs else None
        # (valid from, valid until, the budgets' reservations of amount 0) in unix seconds
        self._period: tuple[float, float, tuple[BudgetReserve, ...]] = (math.inf, -math.inf, ())

    def build(
        self,
        request_id: str,
        *,
        expected_tokens: int,
        worst_case_cost_usd: Decimal,
        now: float,
    ) -> AdmissionRequest:
        """The request's admission; `now` is unix seconds (it picks calendar periods)."""
        buckets = self._buckets
        if self._takes_tokens:
            # loops, not generators, here and below: a generator's frame resumed per
            # item cost more than the items
            taken: list[BucketTake] = []
            for bucket in buckets:
                if bucket.kind != "requests":
                    bucket = BucketTake(
                        bucket.key,
                        bucket.capacity,
                        bucket.refill_per_second,
                        expected_tokens,
                        bucket.scope,
                        "tokens",
                    )
                taken.append(bucket)
            buckets = tuple(taken)
        budgets: tuple[BudgetReserve, ...] = ()
        if self._budget_sources:
            start, end, reserves = self._period
            if not start <= now < end:
                start, end, reserves = self._period = self._budgets_at(now)
            amount_micros = usd_to_micros(worst_case_cost_usd)
            reserved: list[BudgetReserve] = []
            for reserve in reserves:
                reserved.append(
                    BudgetReserve(
                        reserve.key,
                        reserve.limit_usd,
                        worst_case_cost_usd,
                        reserve.scope,
                        reserve.period,
                        reserve.period_end,
                        reserve.window_seconds,
                        reserve.limit_micros,
                        amount_micros,
                    )
                )
            budgets = tuple(reserved)
        return AdmissionRequest(request_id, buckets, self._leases, budgets)

    def _budgets_at(self, now: float) -> tuple[float, float, tuple[BudgetReserve, ...]]:
        """The budgets' reservations (amount 0) at `now`, and the span they hold for."""
        moment = datetime.fromtimestamp(now, UTC)
        start, end = -math.inf, math.inf
        budgets: dict[str, BudgetReserve] = {}
        for owner, budget in self._budget_sources:
            reserve = budget_reserve(owner, budget, Decimal(0), moment)
            if reserve.period != "rolling":
                period_start, _, period_end = calendar_period(reserve.period, moment)
                start, end = max(start, period_start), min(end, period_end)
            # two budgets of one period count the same spend: the tighter one decides
            held = budgets.get(reserve.key)
            if held is None or reserve.limit_usd < held.limit_usd:
                budgets[reserve.key] = reserve
        return start, end, tuple(budgets.values())


def limit_owners(scope: LimitScope, key_prefix: str) -> list[LimitOwner]:
    """Whose limits a request from `scope` counts against: its key, its tenant, the model
    for that tenant, the deployment."""
    tenant_prefix = redis_keys.tenant_prefix(key_prefix, scope.tenant_id)
    owners: list[LimitOwner] = []
    if scope.key is not None:
        owners.append(
            LimitOwner(
                prefix=tenant_prefix,
                path=redis_keys.scope_path("key", scope.key.id),
                scope=f"key {scope.key.id}",
                limits=scope.key.limits,
                budgets=tuple(scope.key.budgets),
            )
        )
    owners.append(
        LimitOwner(
            prefix=tenant_prefix,
            path="tenant",
            scope=f"tenant {scope.tenant_id}",
            limits=scope.tenant.limits,
            budgets=tuple(scope.tenant.budgets),
        )
    )
    model_limits = scope.tenant.model_limits.get(scope.model_alias, scope.model.limits)
    owners.append(
        LimitOwner(
            prefix=tenant_prefix,
            path=redis_keys.scope_path("model", scope.model_alias),
            scope=f"model {scope.model_alias} for tenant {scope.tenant_id}",
            limits=model_limits,
        )
    )
    if scope.deployment_id is not None and scope.deployment is not None:
        owners.append(
            LimitOwner(
                prefix=redis_keys.deployment_prefix(key_prefix, scope.deployment_id),
                path="",
                scope=f"deployment {scope.deployment_id}",
                limits=scope.deployment.limits,
            )
        )
    return owners


def bucket_takes(owner: LimitOwner, expected: int) -> list[BucketTake]:
    limits = owner.limits
    if limits is None:
        return []
    takes: list[BucketTake] = []
    if limits.requests_per_minute:
        takes.append(
            BucketTake(
                key=redis_keys.bucket_key(owner.prefix, owner.path, "requests"),
                capacity=limits.requests_burst or limits.requests_per_minute,
                refill_per_second=limits.requests_per_minute / 60,
                amount=1,
                scope=owner.scope,
                kind="requests",
            )
        )
    if limits.tokens_per_minute:
        takes.append(
            BucketTake(
                key=redis_keys.bucket_key(owner.prefix, owner.path, "tokens"),
                capacity=limits.tokens_burst or limits.tokens_per_minute,
                refill_per_second=limits.tokens_per_minute / 60,
                amount=expected,
                scope=owner.scope,
                kind="tokens",
            )
        )
    return takes


def budget_reserve(
    owner: LimitOwner, budget: BudgetSettings, amount_usd: Decimal, now: datetime
) -> BudgetReserve:
    """The reservation against one budget; calendar periods are UTC."""
    if budget.period == "rolling":
        window = budget.rolling_seconds or 86_400
        return BudgetReserve(
            key=redis_keys.budget_key(owner.prefix, owner.path, f"rolling:{window}"),
            limit_usd=budget.usd,
            amount_usd=amount_usd,
            scope=f"{owner.scope} (rolling {window} s)",
            period="rolling",
            window_seconds=window,
        )
    _, label, end = calendar_period(budget.period, now)
    return BudgetReserve(
        key=redis_keys.budget_key(owner.prefix, owner.path, label),
        limit_usd=budget.usd,
        amount_usd=amount_usd,
        scope=f"{owner.scope} ({budget.period})",
        period=budget.period,
        period_end=end,
    )


def calendar_period(period: Literal["day", "month"], now: datetime) -> tuple[int, str, int]:
    """The UTC day or month holding `now`: its start, its label, its end (unix seconds)."""
    now = now.astimezone(UTC)
    if period == "day":
        start = datetime(now.year, now.month, now.day, tzinfo=UTC)
        end = start + timedelta(days=1)
        label = f"day:{start:%Y-%m-%d}"
    else:
        start = datetime(now.year, now.month, 1, tzinfo=UTC)
        days = calendar.monthrange(now.year, now.month)[1]
        end = start + timedelta(days=days)
        label = f"month:{start:%Y-%m}"
    return int(start.timestamp()), label, int(end.timestamp())
