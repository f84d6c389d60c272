"""The in-memory conversation store: one process's dev and test store, bounded in count
as well as by TTL (the oldest record goes first when full)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from gateway.state.conversation_store import RecordLimits
from gateway.state.stored_response import StoredResponse, decode_record, encode_record


class MemoryConversationStore:
    def __init__(
        self,
        limits: RecordLimits,
        *,
        max_records: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._max_records = max_records
        self._clock = clock
        # (tenant, id) -> (expires at, encoded record), oldest first
        self._records: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()

    async def save(self, tenant: str, record: StoredResponse) -> bool:
        data = encode_record(record)
        if len(data) > self.limits.max_record_bytes:
            return False
        key = (tenant, record.id)
        self._records.pop(key, None)
        self._records[key] = (self._clock() + self.limits.ttl_seconds, data)
        while len(self._records) > self._max_records:
            self._records.popitem(last=False)
        return True

    async def load(self, tenant: str, response_id: str) -> StoredResponse | None:
        found = self._records.get((tenant, response_id))
        if found is None:
            return None
        expires, data = found
        if expires <= self._clock():
            del self._records[(tenant, response_id)]
            return None
        return decode_record(data)

    async def delete(self, tenant: str, response_id: str) -> bool:
        found = self._records.pop((tenant, response_id), None)
        return found is not None and found[0] > self._clock()

    async def close(self) -> None:
        self._records.clear()
