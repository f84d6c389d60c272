"""The in-process limit store for the zero-setup mode (one gateway process, no Redis).

It keeps the Redis store's contract and arithmetic (`lua/admit.lua`, `lua/adjust.lua`)
line for line, so one contract suite proves both. Its clock is injectable for tests.
Each method runs without awaiting, so on one event loop every admission is atomic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.limits.outcome import Outcome, PartKind, admission_from
from gateway.limits.spec import Admission, AdmissionRequest, Lease, Settlement

# same margins as the Lua scripts
MARGIN_SECONDS = 10.0
PERIOD_GRACE_SECONDS = 3600
# as the Redis store's (redis_limit_store.py says why ten minutes is enough)
SETTLED_MARKER_TTL_SECONDS = 600
SWEEP_EVERY_SECONDS = 60.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    expires_at: float


@dataclass(slots=True)
class _Budget:
    spent: dict[str, int] = field(default_factory=dict)
    expires_at: float = math.inf


@dataclass(slots=True)
class _Refusals:
    """Which refusal to report: never-fits, else a budget, else the slowest to free."""

    ok: bool = True
    never: bool = False
    kind: PartKind = ""
    index: int = 0
    retry: float = -1.0

    def refuse(self, kind: PartKind, index: int, wait: float, never: bool) -> None:
        self.ok = False
        if never:
            if not self.never:
                self.never, self.kind, self.index = True, kind, index
            return
        self.retry = max(self.retry, wait)
        if not self.never and _rank(kind) > _rank(self.kind):
            self.kind, self.index = kind, index


def _rank(kind: PartKind) -> int:
    return {"": 0, "b": 1, "l": 1, "g": 2}[kind]


class MemoryLimitStore:
    # no I/O: a call never waits, so no deadline is needed (and None asks for none)
    call_deadline_seconds: float | None = None

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._leases: dict[str, dict[str, float]] = {}
        self._budgets: dict[str, _Budget] = {}
        self._settled: dict[str, float] = {}
        self._next_sweep = clock() + SWEEP_EVERY_SECONDS

    async def admit(self, request: AdmissionRequest) -> Admission:
        if not (request.buckets or request.leases or request.budgets):
            return Admission(allowed=True)
        now = self._now()
        refusals = _Refusals()
        tokens_now: list[float] = []
        for index, take in enumerate(request.buckets):
            tokens = self._tokens(take.key, take.capacity, take.refill_per_second, now)
            tokens_now.append(tokens)
            if take.amount > take.capacity:
                refusals.refuse("b", index, 0, never=True)
            elif tokens < take.amount:
                wait = (take.amount - tokens) / take.refill_per_second
                refusals.refuse("b", index, wait, never=False)
        for index, spec in enumerate(request.leases):
            held = self._live_leases(spec.key, now)
            if request.request_id not in held and len(held) >= spec.limit:
                wait = min(1.0, max(0.001, min(held.values()) - now))
                refusals.refuse("l", index, wait, never=False)
        used_now: list[int] = []
        fields: list[str] = []
        for index, budget in enumerate(request.budgets):
            used, field_name, budget_wait = self._budget_use(
                budget.key,
                budget.amount_micros,
                budget.limit_micros,
                budget.period_end or 0,
                budget.window_seconds or 0,
                now,
            )
            used_now.append(used)
            fields.append(field_name)
            if budget.amount_micros > budget.limit_micros:
                refusals.refuse("g", index, 0, never=True)
            elif budget_wait is not None:
                refusals.refuse("g", index, budget_wait, never=False)
        if refusals.ok:
            for index, take in enumerate(request.buckets):
                tokens_now[index] -= take.amount
                self._store_tokens(
                    take.key, take.capacity, take.refill_per_second, tokens_now[index], now
                )
            for spec in request.leases:
                self._leases.setdefault(spec.key, {})[request.request_id] = now + spec.ttl_seconds
            for index, budget in enumerate(request.budgets):
                self._reserve(
                    budget.key,
                    fields[index],
                    budget.amount_micros,
                    budget.period_end or 0,
                    budget.window_seconds or 0,
                    now,
                )
                used_now[index] += budget.amount_micros
        outcome = Outcome(
            ok=refusals.ok,
            never=refusals.never,
            kind=refusals.kind,
            index=refusals.index,
            retry=refusals.retry,
            tokens_left=tuple(tokens_now),
            budgets_used=tuple(zip(used_now, fields, strict=True)),
            leases_held=tuple(len(self._leases.get(spec.key, ())) for spec in request.leases),
        )
        return admission_from([(request, outcome)])

    async def settle(self, settlement: Settlement) -> bool:
        now = self._now()
        marker = settlement.request_id
        if self._settled.get(marker, -math.inf) > now:
            return False
        self._settled[marker] = now + SETTLED_MARKER_TTL_SECONDS
        for adjustment in settlement.tokens:
            bucket = adjustment.bucket
            tokens = self._tokens(bucket.key, bucket.capacity, bucket.refill_per_second, now)
            left = max(-bucket.capacity, min(bucket.capacity, tokens - adjustment.delta))
            self._store_tokens(bucket.key, bucket.capacity, bucket.refill_per_second, left, now)
        for actual in settlement.budgets:
            budget = self._budgets.get(actual.key)
            if budget is not None and budget.expires_at > now and actual.field in budget.spent:
                budget.spent[actual.field] = max(
                    0, budget.spent[actual.field] + actual.delta_micros
                )
        await self.release(settlement.leases)
        return True

    async def settle_many(
        self, settlements: Sequence[Settlement], *, can_wait: bool = True
    ) -> list[bool]:
        return [await self.settle(settlement) for settlement in settlements]

    async def release(self, leases: Sequence[Lease]) -> None:
        for lease in leases:
            self._leases.get(lease.key, {}).pop(lease.member, None)

    async def renew(self, leases: Sequence[Lease]) -> int:
        now = self._now()
        held = 0
        for lease in leases:
            members = self._leases.get(lease.key, {})
            if lease.member in members:
                members[lease.member] = now + lease.ttl_seconds
                held += 1
        return held

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._buckets.clear()
        self._leases.clear()
        self._budgets.clear()
        self._settled.clear()

    def _now(self) -> float:
        now = self._clock()
        if now >= self._next_sweep:
            self._sweep(now)
            self._next_sweep = now + SWEEP_EVERY_SECONDS
        return now

    def _sweep(self, now: float) -> None:
        """Forget idle state, as Redis expires idle keys."""
        for key in [k for k, bucket in self._buckets.items() if bucket.expires_at <= now]:
            del self._buckets[key]
        for key in [k for k, budget in self._budgets.items() if budget.expires_at <= now]:
            del self._budgets[key]
        for key in list(self._leases):
            if not self._live_leases(key, now):
                del self._leases[key]
        for marker in [m for m, until in self._settled.items() if until <= now]:
            del self._settled[marker]

    def _tokens(self, key: str, capacity: int, rate: float, now: float) -> float:
        bucket = self._buckets.get(key)
        if bucket is None or bucket.expires_at <= now:
            return float(capacity)
        elapsed = max(0.0, now - bucket.stamp)
        return min(float(capacity), bucket.tokens + elapsed * rate)

    def _store_tokens(
        self, key: str, capacity: int, rate: float, tokens: float, now: float
    ) -> None:
        expires_at = now + math.ceil((capacity - tokens) / rate * 1000) / 1000 + MARGIN_SECONDS
        self._buckets[key] = _Bucket(tokens, now, expires_at)

    def _live_leases(self, key: str, now: float) -> dict[str, float]:
        members = self._leases.get(key, {})
        for member in [m for m, expiry in members.items() if expiry <= now]:
            del members[member]
        return members

    def _budget_use(
        self, key: str, amount: int, limit: int, period_end: int, window: int, now: float
    ) -> tuple[int, str, float | None]:
        """Spend so far, the field a reservation goes to, and the wait if it is refused."""
        budget = self._budgets.get(key)
        if budget is not None and budget.expires_at <= now:
            del self._budgets[key]
            budget = None
        spent = budget.spent if budget else {}
        if window <= 0:
            used = spent.get("spent", 0)
            period_wait = max(0.0, period_end - now) if used + amount > limit else None
            return used, "spent", period_wait
        slot, slots = _rolling_slots(window)
        current = math.floor(now / slot)
        for stale in [at for at in spent if int(at) <= current - slots]:
            del spent[stale]
        used = sum(spent.values())
        if used + amount <= limit:
            return used, str(current), None
        excess = used + amount - limit
        wait: float = window
        for at in sorted(spent, key=int):
            excess -= spent[at]
            if excess <= 0:
                wait = max(0.0, (int(at) + slots) * slot - now)
                break
        return used, str(current), wait

    def _reserve(
        self, key: str, field_name: str, amount: int, period_end: int, window: int, now: float
    ) -> None:
        budget = self._budgets.setdefault(key, _Budget())
        budget.spent[field_name] = budget.spent.get(field_name, 0) + amount
        if window > 0:
            budget.expires_at = now + window + _rolling_slots(window)[0]
        else:
            budget.expires_at = period_end + PERIOD_GRACE_SECONDS


def _rolling_slots(window: int) -> tuple[int, int]:
    """A rolling window is counted in about 60 slots: (slot seconds, slot count)."""
    slot = max(1, math.ceil(window / 60))
    return slot, math.ceil(window / slot)
