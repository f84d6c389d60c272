"""What a limit store is asked and what it answers: plain data, no behaviour beyond
conversions.

A request's admission is one :class:`AdmissionRequest`: every token bucket it takes from,
every concurrency lease it holds, every budget it reserves against. The store answers
with one :class:`Admission`, all or nothing. After the response, a :class:`Settlement`
replaces the reservations with what was really used.

Money is a :class:`~decimal.Decimal` of USD here and integer micro-dollars inside the
stores, so sums never drift. Reservations and charges round up to the next micro-dollar:
a budget may be charged a fraction of a micro-dollar too much, never too little.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Literal

import msgspec
from msgspec.structs import force_setattr

BucketKind = Literal["requests", "tokens"]
RefusalKind = Literal["requests", "tokens", "concurrency", "budget"]
BudgetPeriod = Literal["day", "month", "rolling"]

MICROS_PER_USD = Decimal(1_000_000)


def usd_to_micros(usd: Decimal, *, round_up: bool = True) -> int:
    """USD as integer micro-dollars; up for charges, down for limits (never overshoot)."""
    rounding = ROUND_CEILING if round_up else ROUND_FLOOR
    return int((usd * MICROS_PER_USD).to_integral_value(rounding=rounding))


def micros_to_usd(micros: int) -> Decimal:
    return Decimal(micros) / MICROS_PER_USD


class BucketTake(msgspec.Struct, frozen=True):
    """Take `amount` from a token bucket holding at most `capacity`, refilled continuously
    at `refill_per_second`. `scope` names the limit for people ("key k1")."""

    key: str
    capacity: int
    refill_per_second: float
    amount: int
    scope: str
    kind: BucketKind


class LeaseSpec(msgspec.Struct, frozen=True):
    """Hold one of `limit` concurrency slots; the slot frees itself after `ttl_seconds`
    unless renewed, so a crashed replica or an abandoned stream cannot leak it."""

    key: str
    limit: int
    ttl_seconds: float
    scope: str


class BudgetReserve(msgspec.Struct, frozen=True):
    """Reserve `amount_usd` (the request's worst-case cost) against `limit_usd`.

    Calendar periods (`day`, `month`) put the period's label in `key` and end at
    `period_end` (unix seconds); `rolling` budgets count the last `window_seconds`.
    """

    key: str
    limit_usd: Decimal
    amount_usd: Decimal
    scope: str
    period: BudgetPeriod
    period_end: int | None = None
    window_seconds: int | None = None
    # the USD amounts in integer micro-dollars (limit rounded down, amount up), converted
    # once at construction; a caller that already holds them may pass them (computed by
    # `usd_to_micros` from the same amounts) to skip the Decimal arithmetic
    limit_micros: int = -1
    amount_micros: int = -1

    def __post_init__(self) -> None:
        if self.limit_micros < 0:
            force_setattr(self, "limit_micros", usd_to_micros(self.limit_usd, round_up=False))
        if self.amount_micros < 0:
            force_setattr(self, "amount_micros", usd_to_micros(self.amount_usd))


class AdmissionRequest(msgspec.Struct, frozen=True):
    request_id: str
    buckets: tuple[BucketTake, ...] = ()
    leases: tuple[LeaseSpec, ...] = ()
    budgets: tuple[BudgetReserve, ...] = ()


class Refusal(msgspec.Struct, frozen=True):
    """Why a request was refused: the limit, what it holds and what the request needed."""

    scope: str
    kind: RefusalKind
    # seconds until the limit could serve it; None when it never can
    retry_after_seconds: float | None
    never_fits: bool
    # the limit's size and the request's need, in the limit's unit
    # (requests, tokens, concurrent requests, or micro-dollars for budgets)
    limit: float
    requested: float


class BucketState(msgspec.Struct, frozen=True):
    """One bucket after admission, for the `x-ratelimit-*` headers."""

    key: str
    scope: str
    kind: BucketKind
    limit: int
    remaining: float
    # seconds until the bucket is full again
    reset_seconds: float


class Lease(msgspec.Struct, frozen=True):
    """A held concurrency slot: `member` in the sorted set at `key`."""

    key: str
    member: str
    ttl_seconds: float


class BudgetState(msgspec.Struct, frozen=True):
    """A budget after admission; `field` locates the reservation for settlement."""

    key: str
    scope: str
    field: str
    reserved_micros: int
    used_micros: int
    limit_micros: int

    @property
    def used_fraction(self) -> float:
        return self.used_micros / self.limit_micros if self.limit_micros else 1.0


class Admission(msgspec.Struct, frozen=True):
    allowed: bool
    refusal: Refusal | None = None
    # the tightest bucket of each kind (least remaining), refused or not
    requests: BucketState | None = None
    tokens: BucketState | None = None
    leases: tuple[Lease, ...] = ()
    budgets: tuple[BudgetState, ...] = ()
    # admitted without consulting the store (fail_open while it is unreachable)
    degraded: bool = False
    # the fewest free slots left among its concurrency limits (None: it has none)
    slots_free: int | None = None

    @property
    def refused_scope(self) -> str | None:
        return self.refusal.scope if self.refusal else None

    @property
    def refused_kind(self) -> RefusalKind | None:
        return self.refusal.kind if self.refusal else None

    @property
    def retry_after_seconds(self) -> float | None:
        return self.refusal.retry_after_seconds if self.refusal else None

    @property
    def never_fits(self) -> bool:
        return bool(self.refusal and self.refusal.never_fits)


class TokenAdjustment(msgspec.Struct, frozen=True):
    """Tokens really used minus tokens reserved: negative refunds, positive charges."""

    bucket: BucketTake
    delta: int


class BudgetActual(msgspec.Struct, frozen=True):
    key: str
    field: str
    reserved_micros: int
    actual_micros: int

    @property
    def delta_micros(self) -> int:
        return self.actual_micros - self.reserved_micros


class Settlement(msgspec.Struct, frozen=True):
    """Real usage replacing one request's reservations. Settling twice changes nothing.

    `leases` are freed in the same step: settling a finished request and giving back its
    concurrency slot is one store round trip, not two.
    """

    request_id: str
    tokens: tuple[TokenAdjustment, ...] = ()
    budgets: tuple[BudgetActual, ...] = ()
    leases: tuple[Lease, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tokens or self.budgets or self.leases)


def settlement_for(
    request: AdmissionRequest,
    admission: Admission,
    *,
    actual_tokens: int,
    actual_cost_usd: Decimal,
    release_leases: bool = False,
    served: bool = True,
) -> Settlement:
    """The settlement of an admitted request once its usage and cost are known.

    Every tokens bucket gets `actual - reserved`; every budget's reservation is replaced
    by the actual cost. Requests buckets are left alone: the request happened, unless
    `served` is False (an admission made ahead that no request used: it gets its
    request back too).
    """
    # loops, not generators: a generator's frame resumed per item cost more than it
    adjustments: list[TokenAdjustment] = []
    for bucket in request.buckets:
        if bucket.kind == "tokens":
            if actual_tokens != bucket.amount:
                adjustments.append(TokenAdjustment(bucket, actual_tokens - bucket.amount))
        elif not served:
            adjustments.append(TokenAdjustment(bucket, -bucket.amount))
    actual_micros = usd_to_micros(actual_cost_usd)
    actuals: list[BudgetActual] = []
    for state in admission.budgets:
        actuals.append(BudgetActual(state.key, state.field, state.reserved_micros, actual_micros))
    tokens, budgets = tuple(adjustments), tuple(actuals)
    leases = admission.leases if release_leases else ()
    return Settlement(request.request_id, tokens, budgets, leases)
