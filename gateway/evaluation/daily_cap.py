"""A charged tenant's daily evaluation cap, kept per call: the call's worst case is
reserved before it is made (one atomic step in the labels store: several workers and
replicas reserving at once never pass the cap together) and settled with its real cost
after it."""

from __future__ import annotations

from decimal import Decimal

from gateway.evaluation.store import LabelStore


class DailyCap:
    """One call's share of the charged tenant's daily cap: `reserve` its worst-case cost
    before the call (False: it does not fit, the call is not made), `settle` with what
    it really cost after it (or 0 when it was never made)."""

    def __init__(self, store: LabelStore, tenant: str, day: str, cap_usd: Decimal) -> None:
        self._store = store
        self.tenant = tenant
        self._day = day
        self._cap = cap_usd
        self.reserved = Decimal(0)

    async def reserve(self, usd: Decimal) -> bool:
        if not await self._store.reserve_spend(self.tenant, self._day, usd, self._cap):
            return False
        self.reserved += usd
        return True

    async def settle(self, cost_usd: Decimal) -> None:
        difference, self.reserved = cost_usd - self.reserved, Decimal(0)
        if difference:
            await self._store.add_spend(self.tenant, self._day, difference)
