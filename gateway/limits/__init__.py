"""Rate limits, concurrency leases and budget reservations: one contract
(:class:`LimitStore`), a Redis store (Lua) and an in-memory store.

The serving path: :func:`plan_admission` (pure) -> ``store.admit`` -> serve ->
:func:`settlement_for` -> ``store.settle``; leases are held with
``async with holding(store, admission.leases)`` around the upstream call or stream.
"""

from gateway.limits.answers import format_duration, rate_limit_headers, refusal_error
from gateway.limits.guarded import GuardedLimitStore
from gateway.limits.leases import holding
from gateway.limits.limit_store import LimitStore
from gateway.limits.memory_store import MemoryLimitStore
from gateway.limits.redis_limit_store import RedisLimitStore, redis_client
from gateway.limits.request_limits import RequestLimits, expected_tokens, plan_admission
from gateway.limits.spec import (
    Admission,
    AdmissionRequest,
    BucketState,
    BucketTake,
    BudgetActual,
    BudgetReserve,
    BudgetState,
    Lease,
    LeaseSpec,
    Refusal,
    Settlement,
    TokenAdjustment,
    settlement_for,
)
from gateway.limits.waiting import admit_waiting

__all__ = [
    "Admission",
    "AdmissionRequest",
    "BucketState",
    "BucketTake",
    "BudgetActual",
    "BudgetReserve",
    "BudgetState",
    "GuardedLimitStore",
    "Lease",
    "LeaseSpec",
    "LimitStore",
    "MemoryLimitStore",
    "RedisLimitStore",
    "Refusal",
    "RequestLimits",
    "Settlement",
    "TokenAdjustment",
    "admit_waiting",
    "expected_tokens",
    "format_duration",
    "holding",
    "plan_admission",
    "rate_limit_headers",
    "redis_client",
    "refusal_error",
    "settlement_for",
]
