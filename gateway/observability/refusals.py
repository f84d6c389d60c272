"""The newest refused or failed requests (4xx/5xx answers, limit refusals), for the
operator's views (the console, `GET /admin/refusals`): what the ledger does not hold,
since a refusal spent nothing and the ledger stays exact.

Bounded: a ring of the newest `capacity` records per process, never written to the
ledger or Redis; the access log has every one of them durably."""

from __future__ import annotations

from collections import deque
from typing import Any

import msgspec


class Refusal(msgspec.Struct, frozen=True):
    time: float
    request_id: str
    status: int
    code: str
    reason: str
    tenant: str = ""
    key_id: str = ""
    route: str = ""
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


class RecentRefusals:
    def __init__(self, capacity: int = 200) -> None:
        self._ring: deque[Refusal] = deque(maxlen=capacity)

    def add(self, refusal: Refusal) -> None:
        self._ring.append(refusal)

    def newest(self, limit: int) -> list[Refusal]:
        """Newest first."""
        ring = self._ring
        return [ring[-i] for i in range(1, min(limit, len(ring)) + 1)]
