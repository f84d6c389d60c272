"""The newest ledger records, for the console's list of recent requests: the records
themselves (route, cost, latency are in each), not a second store."""

from __future__ import annotations

from typing import Any

from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger_record import LedgerRecord
from gateway.metering.memory_ledger import MemoryLedger


def recent_memory(ledger: MemoryLedger, limit: int) -> list[LedgerRecord]:
    """Newest first."""
    return list(reversed(ledger.records[-limit:]))


async def recent_redis(redis: Any, keys: LedgerKeys, limit: int) -> list[LedgerRecord]:
    """Newest first; an entry that does not decode is skipped, not fatal to the list."""
    entries = await redis.xrevrange(keys.stream, count=limit) or []
    records = []
    for _entry_id, fields in entries:
        raw = fields.get(b"record", fields.get("record"))
        if isinstance(raw, bytes | str):
            try:
                records.append(LedgerRecord.from_json(raw))
            except ValueError:
                continue
    return records
