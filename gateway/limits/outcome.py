"""The raw answer of one admission check and how it becomes an :class:`Admission`.

Both stores compute the same raw answer (the Redis one in Lua, the memory one in Python)
so both build their :class:`Admission` here, identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from gateway.limits.spec import (
    Admission,
    AdmissionRequest,
    BucketKind,
    BucketState,
    BudgetState,
    Lease,
    Refusal,
)

PartKind = Literal["", "b", "l", "g"]


class Outcome(msgspec.Struct, frozen=True):
    """One check over one part of a request (one cluster slot's worth, or all of it)."""

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


def outcome_from_script(raw: Any) -> Outcome:
    """Decode admit.lua's JSON; cjson writes an empty array as `{}`."""
    data = msgspec.json.decode(raw)

    def items(value: Any) -> list[Any]:
        return list(value) if isinstance(value, list) else []

    return Outcome(
        ok=bool(data["ok"]),
        never=bool(data["never"]),
        kind=data["kind"],
        index=int(data["i"]) - 1,
        retry=float(data["retry"]),
        tokens_left=tuple(float(tokens) for tokens in items(data["b"])),
        budgets_used=tuple((int(used), str(field)) for used, field in items(data["g"])),
    )


def admission_from(parts: Sequence[tuple[AdmissionRequest, Outcome]]) -> Admission:
    """One Admission from the checks of a request's parts; a refused part is the last."""
    states: list[BucketState] = []
    budgets: list[BudgetState] = []
    refusal: Refusal | None = None
    leases: list[Lease] = []
    for part, outcome in parts:
        states.extend(_bucket_states(part, outcome))
        budgets.extend(_budget_states(part, outcome))
        if not outcome.ok:
            refusal = _refusal(part, outcome)
        else:
            leases.extend(
                Lease(spec.key, part.request_id, spec.ttl_seconds) for spec in part.leases
            )
    allowed = refusal is None
    return Admission(
        allowed=allowed,
        refusal=refusal,
        requests=_tightest(states, "requests"),
        tokens=_tightest(states, "tokens"),
        leases=tuple(leases) if allowed else (),
        budgets=tuple(budgets),
    )


def _bucket_states(part: AdmissionRequest, outcome: Outcome) -> list[BucketState]:
    return [
        BucketState(
            key=bucket.key,
            scope=bucket.scope,
            kind=bucket.kind,
            limit=bucket.capacity,
            remaining=max(0.0, tokens),
            reset_seconds=max(0.0, (bucket.capacity - tokens) / bucket.refill_per_second),
        )
        for bucket, tokens in zip(part.buckets, outcome.tokens_left, strict=True)
    ]


def _budget_states(part: AdmissionRequest, outcome: Outcome) -> list[BudgetState]:
    return [
        BudgetState(
            key=budget.key,
            scope=budget.scope,
            field=field,
            reserved_micros=budget.amount_micros if outcome.ok else 0,
            used_micros=used,
            limit_micros=budget.limit_micros,
        )
        for budget, (used, field) in zip(part.budgets, outcome.budgets_used, strict=True)
    ]


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


def _tightest(states: Sequence[BucketState], kind: BucketKind) -> BucketState | None:
    """The bucket of `kind` with the least left; the slowest to refill breaks a tie."""
    candidates = [state for state in states if state.kind == kind]
    if not candidates:
        return None
    return min(candidates, key=lambda state: (state.remaining, -state.reset_seconds))
