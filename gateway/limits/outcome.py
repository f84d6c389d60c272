"""The raw answer of one admission check and how it becomes an :class:`Admission`.

Both stores compute the same raw answer (the Redis one in Lua, the memory one in Python)
so both build their :class:`Admission` here, identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from gateway.limits.spec import (
    Admission,
    AdmissionRequest,
    BucketKind,
    BucketState,
    BucketTake,
    BudgetState,
    Lease,
    Refusal,
)

PartKind = Literal["", "b", "l", "g"]


class Outcome(msgspec.Struct, frozen=True, array_like=True):
    """One check over one part of a request (one cluster slot's worth, or all of it).

    `array_like`: admit.lua answers with these fields as one JSON array, in this order."""

    ok: bool
    never: bool
    # which limit is reported: "b" bucket, "l" lease, "g" budget, and its 0-based index
    kind: PartKind
    index: int
    # seconds until every refused limit could serve it; negative when none applies
    retry: float
    # tokens in each bucket after the take (before it, when refused)
    tokens_left: tuple[float, ...]
    # each budget's spend after the reservation (before it, when refused) and its field
    budgets_used: tuple[tuple[int, str], ...]
    # each lease set's members after the request (before it, when refused), expired ones
    # not yet reclaimed included: an upper bound on the slots in use
    leases_held: tuple[int, ...] = ()


_decode_outcome = msgspec.json.Decoder(Outcome).decode


def outcome_from_script(raw: bytes | str) -> Outcome:
    """Decode admit.lua's answer."""
    return _decode_outcome(raw)


def admission_from(parts: Sequence[tuple[AdmissionRequest, Outcome]]) -> Admission:
    """One Admission from the checks of a request's parts; a refused part is the last."""
    tightest: dict[BucketKind, tuple[float, float, BucketTake]] = {}
    budgets: list[BudgetState] = []
    refusal: Refusal | None = None
    leases: list[Lease] = []
    slots_free: int | None = None
    for part, outcome in parts:
        for spec, members in zip(part.leases, outcome.leases_held, strict=False):
            free = spec.limit - members
            if slots_free is None or free < slots_free:
                slots_free = free
        for bucket, tokens in zip(part.buckets, outcome.tokens_left, strict=True):
            remaining = max(0.0, tokens)
            reset = max(0.0, (bucket.capacity - tokens) / bucket.refill_per_second)
            # the bucket of its kind with the least left; the slowest to refill breaks a
            # tie, and the first of equals stays
            held = tightest.get(bucket.kind)
            if held is None or remaining < held[0] or (remaining == held[0] and reset > held[1]):
                tightest[bucket.kind] = (remaining, reset, bucket)
        # loops, not generators: a generator's frame resumed per item cost more than it
        for budget, (used, field) in zip(part.budgets, outcome.budgets_used, strict=True):
            budgets.append(
                BudgetState(
                    budget.key,
                    budget.scope,
                    field,
                    budget.amount_micros if outcome.ok else 0,
                    used,
                    budget.limit_micros,
                )
            )
        if not outcome.ok:
            refusal = _refusal(part, outcome)
        else:
            for spec in part.leases:
                leases.append(Lease(spec.key, part.request_id, spec.ttl_seconds))
    allowed = refusal is None
    return Admission(
        allowed=allowed,
        refusal=refusal,
        requests=_state(tightest.get("requests")),
        tokens=_state(tightest.get("tokens")),
        leases=tuple(leases) if allowed else (),
        budgets=tuple(budgets),
        slots_free=slots_free,
    )


def _state(tightest: tuple[float, float, BucketTake] | None) -> BucketState | None:
    if tightest is None:
        return None
    remaining, reset, bucket = tightest
    return BucketState(bucket.key, bucket.scope, bucket.kind, bucket.capacity, remaining, reset)


def _refusal(part: AdmissionRequest, outcome: Outcome) -> Refusal:
    retry = None if outcome.never else max(0.0, outcome.retry)
    if outcome.kind == "b":
        bucket = part.buckets[outcome.index]
        return Refusal(
            bucket.scope, bucket.kind, retry, outcome.never, bucket.capacity, bucket.amount
        )
    if outcome.kind == "l":
        lease = part.leases[outcome.index]
        return Refusal(lease.scope, "concurrency", retry, outcome.never, lease.limit, 1)
    budget = part.budgets[outcome.index]
    return Refusal(
        budget.scope,
        "budget",
        retry,
        outcome.never,
        budget.limit_micros,
        budget.amount_micros,
    )
