"""The ledger of the zero-setup mode: records and aggregates kept in this process.

Same interface as the Redis `Ledger`, same once-per-request-id rule. It keeps the most
recent `max_records` records (the oldest leave first) and every day and month aggregate
(a few small dicts per day). Nothing survives a restart; one process only.
"""

from __future__ import annotations

from collections import deque

from gateway.metering.aggregates import DIMENSIONS, Dimension, Period, Totals, member_of
from gateway.metering.record import LedgerRecord

AggregateKey = tuple[Period, str, Dimension, str]  # period, when, dimension, member


class MemoryLedger:
    def __init__(self, max_records: int = 100_000) -> None:
        if max_records < 1:
            raise ValueError("max_records must be positive")
        self.max_records = max_records
        self._records: deque[LedgerRecord] = deque()
        self._request_ids: set[str] = set()
        self._aggregates: dict[AggregateKey, Totals] = {}
        self.records_written = 0
        self.duplicates_skipped = 0
        self.write_failures = 0
        self.records_dropped = 0

    @property
    def queue_depth(self) -> int:
        return 0

    @property
    def records(self) -> list[LedgerRecord]:
        """The kept records, oldest first."""
        return list(self._records)

    def record(self, record: LedgerRecord) -> None:
        if record.request_id in self._request_ids:
            self.duplicates_skipped += 1
            return
        if len(self._records) >= self.max_records:
            evicted = self._records.popleft()
            self._request_ids.discard(evicted.request_id)
        self._records.append(record)
        self._request_ids.add(record.request_id)
        for dimension in DIMENSIONS:
            member = member_of(record, dimension)
            self._totals("day", record.day, dimension, member).add_record(record)
            self._totals("month", record.month, dimension, member).add_record(record)
        self.records_written += 1

    def aggregate(self, period: Period, when: str, dimension: Dimension) -> dict[str, Totals]:
        """Totals per member of `dimension` for one day (`YYYY-MM-DD`) or month (`YYYY-MM`)."""
        return {
            member: totals
            for (p, w, d, member), totals in self._aggregates.items()
            if (p, w, d) == (period, when, dimension)
        }

    async def start(self) -> None:
        return None

    async def close(self, grace_seconds: float = 10.0) -> None:
        return None

    def _totals(self, period: Period, when: str, dimension: Dimension, member: str) -> Totals:
        key: AggregateKey = (period, when, dimension, member)
        totals = self._aggregates.get(key)
        if totals is None:
            totals = self._aggregates[key] = Totals()
        return totals
