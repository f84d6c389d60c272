"""The one contract every limit store keeps (Redis, in-memory, and the failure guard).

- `admit` checks and takes every bucket, lease and budget of a request, all or nothing.
  Buckets refill continuously on the store's clock (Redis server time for Redis); a take
  larger than a bucket's capacity, or a reservation larger than a budget, is refused with
  `never_fits`. Admitting the same request id twice holds its leases once.
- `settle` replaces reservations with real usage (refund or charge the difference);
  settling the same request id again changes nothing and returns False.
- `release` frees leases; `renew` extends them (long streams) and returns how many were
  still held. An expired lease is free: admission reclaims it when its key is full, and
  renewing it finds it gone.
- Stores that talk to a server raise :class:`gateway.errors.StoreUnavailable` when it
  does not answer in time; :mod:`gateway.limits.guarded` turns that into the configured
  fail-open or fail-closed behaviour. `call_deadline_seconds` says how long a store's
  call can take at most, when the store bounds it itself (None: unbounded or unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.limits.spec import Admission, AdmissionRequest, Lease, Settlement


class LimitStore(Protocol):
    call_deadline_seconds: float | None

    async def admit(self, request: AdmissionRequest) -> Admission: ...

    async def settle(self, settlement: Settlement) -> bool: ...

    async def settle_many(
        self, settlements: Sequence[Settlement], *, can_wait: bool = True
    ) -> list[bool]:
        """`can_wait`: the settlements may wait a moment for other store calls to share
        their trip (a shared store under load); False sends them at once."""
        ...

    async def release(self, leases: Sequence[Lease]) -> None: ...

    async def renew(self, leases: Sequence[Lease]) -> int: ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...
