"""Where labels live: the contract every store keeps, and the in-memory store (dev mode,
tests, one process). gateway/evaluation/redis_store.py is the shared, durable one.

A label is written once per (tenant, request id, metric): a second `add` of the same
returns False and changes nothing, so a job evaluated twice (a retry, a restart that
enqueued it again) or feedback sent twice never counts twice."""

from __future__ import annotations

from collections import OrderedDict, deque
from decimal import Decimal
from typing import Protocol

from gateway.evaluation.labels import Label, RequestNote


class LabelStore(Protocol):
    async def add(self, label: Label) -> bool:
        """Store `label` unless one exists for its tenant, request id and metric."""
        ...

    async def has(self, tenant: str, request_id: str, metric: str) -> bool: ...

    async def recent(self, limit: int) -> list[Label]:
        """The newest `limit` labels, newest first, every tenant's."""
        ...

    async def note(self, notes: list[RequestNote]) -> None: ...

    async def request_note(self, tenant: str, request_id: str) -> RequestNote | None:
        """The note of a request `tenant` made (None: unknown, another tenant's, expired)."""
        ...

    async def add_spend(self, tenant: str, day: str, usd: Decimal) -> Decimal:
        """Add evaluation spend to a tenant's UTC day; the day's total after it."""
        ...

    async def reserve_spend(self, tenant: str, day: str, usd: Decimal, cap_usd: Decimal) -> bool:
        """Add `usd` to the day's spend only if the total stays within `cap_usd`, in one
        atomic step (several workers reserving at once never pass the cap together)."""
        ...

    async def spend(self, tenant: str, day: str) -> Decimal: ...

    async def close(self) -> None: ...


class MemoryLabelStore:
    """One process's labels, bounded (the oldest go first); lost when it stops."""

    def __init__(self, max_labels: int = 100_000) -> None:
        self._labels: deque[Label] = deque(maxlen=max_labels)
        self._written: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._notes: OrderedDict[tuple[str, str], RequestNote] = OrderedDict()
        self._spend: dict[tuple[str, str], Decimal] = {}
        self._max = max_labels

    async def add(self, label: Label) -> bool:
        key = (label.tenant, label.request_id, label.metric)
        if key in self._written:
            return False
        self._written[key] = None
        while len(self._written) > self._max:
            self._written.popitem(last=False)
        self._labels.append(label)
        return True

    async def has(self, tenant: str, request_id: str, metric: str) -> bool:
        return (tenant, request_id, metric) in self._written

    async def recent(self, limit: int) -> list[Label]:
        return list(reversed(self._labels))[:limit]

    async def note(self, notes: list[RequestNote]) -> None:
        for note in notes:
            self._notes[note.tenant, note.request_id] = note
        while len(self._notes) > self._max:
            self._notes.popitem(last=False)

    async def request_note(self, tenant: str, request_id: str) -> RequestNote | None:
        return self._notes.get((tenant, request_id))

    async def add_spend(self, tenant: str, day: str, usd: Decimal) -> Decimal:
        for old in [k for k in self._spend if k[1] != day]:
            del self._spend[old]  # only today's counts are ever read
        total = self._spend.get((tenant, day), Decimal(0)) + usd
        self._spend[tenant, day] = total
        return total

    async def reserve_spend(self, tenant: str, day: str, usd: Decimal, cap_usd: Decimal) -> bool:
        # no await between the check and the add: atomic on the one event loop
        if self._spend.get((tenant, day), Decimal(0)) + usd > cap_usd:
            return False
        await self.add_spend(tenant, day, usd)
        return True

    async def spend(self, tenant: str, day: str) -> Decimal:
        return self._spend.get((tenant, day), Decimal(0))

    async def close(self) -> None:
        return None
