"""Small builders for admission requests in tests; keys carry a tenant hash tag like the
planner's."""

from __future__ import annotations

import uuid
from decimal import Decimal

from gateway.limits import AdmissionRequest, BucketTake, BudgetReserve, LeaseSpec
from gateway.limits.spec import BucketKind

TAG = "gw:{t:test}"


def requests_bucket(
    name: str = "key", capacity: int = 10, per_second: float = 0.001, tag: str = TAG
) -> BucketTake:
    return bucket(name, "requests", capacity, per_second, 1, tag)


def tokens_bucket(
    name: str = "key",
    capacity: int = 1000,
    per_second: float = 0.001,
    amount: int = 100,
    tag: str = TAG,
) -> BucketTake:
    return bucket(name, "tokens", capacity, per_second, amount, tag)


def bucket(
    name: str, kind: BucketKind, capacity: int, per_second: float, amount: int, tag: str = TAG
) -> BucketTake:
    suffix = "req" if kind == "requests" else "tok"
    return BucketTake(f"{tag}:rl:{name}:{suffix}", capacity, per_second, amount, name, kind)


def lease(name: str = "key", limit: int = 2, ttl_seconds: float = 30.0) -> LeaseSpec:
    return LeaseSpec(f"{TAG}:lease:{name}", limit, ttl_seconds, name)


def rolling_budget(
    limit_usd: str = "1", amount_usd: str = "0.25", name: str = "tenant", window: int = 3600
) -> BudgetReserve:
    return BudgetReserve(
        f"{TAG}:budget:{name}:rolling:{window}",
        Decimal(limit_usd),
        Decimal(amount_usd),
        name,
        "rolling",
        window_seconds=window,
    )


def day_budget(
    limit_usd: str, amount_usd: str, period_end: int, name: str = "tenant"
) -> BudgetReserve:
    return BudgetReserve(
        f"{TAG}:budget:{name}:day",
        Decimal(limit_usd),
        Decimal(amount_usd),
        name,
        "day",
        period_end=period_end,
    )


def admission(
    *,
    buckets: tuple[BucketTake, ...] = (),
    leases: tuple[LeaseSpec, ...] = (),
    budgets: tuple[BudgetReserve, ...] = (),
    request_id: str | None = None,
) -> AdmissionRequest:
    return AdmissionRequest(request_id or uuid.uuid4().hex, buckets, leases, budgets)
