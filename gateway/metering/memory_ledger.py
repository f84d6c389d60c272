"""The ledger of the zero-setup mode: records and aggregates kept in this process.

Same interface as the Redis `Ledger`, same once-per-request-id rule (among the kept
records). It keeps the most recent `max_records` records (the oldest leave first;
`store.memory_ledger_records`) and, for ever, one `Totals` per UTC day and tenant, key,
model and provider: a record adds to one of them, and every day or month aggregate, and
every spend report over whole days, is summed from them exactly however many records
have left. Nothing survives a restart; one process only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from gateway.metering.aggregates import DIMENSIONS, Dimension, Period, Totals
from gateway.metering.ledger_record import LedgerRecord, utc_day

# a UTC day (`YYYY-MM-DD`), then the record's tenant, key id, model and provider
DayMembers = tuple[str, str, str, str, str]
DEFAULT_MAX_RECORDS = 10_000


class MemoryLedger:
    def __init__(self, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        if max_records < 1:
            raise ValueError("max_records must be positive")
        self.max_records = max_records
        self._records: deque[LedgerRecord] = deque()
        self._request_ids: set[str] = set()
        self._totals: dict[DayMembers, Totals] = {}
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
        request_id = record.once_key
        if request_id in self._request_ids:
            self.duplicates_skipped += 1
            return
        records = self._records
        if len(records) >= self.max_records:
            self._request_ids.discard(records.popleft().once_key)
        records.append(record)
        self._request_ids.add(request_id)
        key = (utc_day(record.time), record.tenant, record.key_id, record.model, record.provider)
        totals = self._totals.get(key)
        if totals is None:
            totals = self._totals[key] = Totals()
        totals.add_record(record)
        self.records_written += 1

    def day_totals(self) -> Iterator[tuple[DayMembers, Totals]]:
        """Every record ever written, summed per UTC day and members."""
        return iter(self._totals.items())

    def aggregate(self, period: Period, when: str, dimension: Dimension) -> dict[str, Totals]:
        """Totals per member of `dimension` for one day (`YYYY-MM-DD`) or month (`YYYY-MM`)."""
        position = 1 + DIMENSIONS.index(dimension)
        members: dict[str, Totals] = {}
        for key, totals in self._totals.items():
            day = key[0]
            if day == when if period == "day" else day[:7] == when:
                members.setdefault(key[position], Totals()).add(totals)
        return members

    async def start(self) -> None:
        return None

    async def close(self, grace_seconds: float = 10.0) -> None:
        return None
