"""Where the ledger lives in Redis, and the totals its aggregate counters add up to.

Key layout (one hash tag, so the write script's keys share a Redis Cluster slot):

    {prefix}:{ledger}:stream                        the records (XADD, trimmed by MINID)
    {prefix}:{ledger}:seen:{process}:{n}            "written once" bits (SETBIT, TTL)
    {prefix}:{ledger}:seen:{request_id}             "written once" marker (SET, TTL)
    {prefix}:{ledger}:agg:day:{YYYY-MM-DD}:{dim}    day counters (HINCRBY, TTL)
    {prefix}:{ledger}:agg:month:{YYYY-MM}:{dim}     month counters (HINCRBY, TTL)

A record the gateway minted the id of (`req_<process><counter>`, pipeline/request_ids)
is marked written by one bit, at its counter's offset in its process's bitmap, a key per
SEEN_BITS_PER_KEY requests: a day of 3,000 requests a second is 32 MB and ~250 keys, where
a key per request was ~520 million keys. Any other id (a record from before record ids,
a client's request id) keeps a key of its own.

`dim` is one of tenant, key, model, provider. An aggregate hash holds one field per
metric and member, `{metric}|{member}` (e.g. `cost_nanousd|acme`), so one HGETALL reads a
whole dimension for a period. Costs are integer nano-dollars.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Literal

from gateway.metering.ledger_record import TOKEN_KINDS, LedgerRecord, nanos_to_usd

Dimension = Literal["tenant", "key", "model", "provider"]
DIMENSIONS: tuple[Dimension, ...] = ("tenant", "key", "model", "provider")
Period = Literal["day", "month"]
# counters per member: requests, cost, each token kind, records whose usage was estimated
METRICS = ("requests", "cost_nanousd", *TOKEN_KINDS, "estimated")
FIELD_SEPARATOR = "|"
# requests per "written once" bitmap key: 128 KB of bits
SEEN_BITS_PER_KEY = 1 << 20
# a minted record id: the process's 16 hex digits, then its counter in at least 8
_MINTED_ID = re.compile(r"req_([0-9a-f]{16})([0-9a-f]{8,})")


class LedgerKeys:
    def __init__(self, prefix: str = "gw") -> None:
        self.base = f"{prefix}:{{ledger}}"

    @property
    def stream(self) -> str:
        return f"{self.base}:stream"

    def seen(self, request_id: str) -> str:
        return f"{self.base}:seen:{request_id}"

    def written_marker(self, record: LedgerRecord) -> tuple[str, int]:
        """Where the record is marked written: a bitmap key and the bit's offset for an
        id the gateway minted, else the record's own key and -1."""
        minted = _MINTED_ID.fullmatch(record.record_id)
        if minted is not None:
            process, digits = minted.groups()
            counter = int(digits, 16)
            # only the canonical spelling: another spelling of the same counter is
            # another id, and must not share its bit
            if f"{counter:08x}" == digits:
                bitmap, offset = divmod(counter, SEEN_BITS_PER_KEY)
                return f"{self.base}:seen:{process}:{bitmap}", offset
        return self.seen(record.once_key), -1

    def aggregate(self, period: Period, when: str, dimension: Dimension) -> str:
        """`when` is `YYYY-MM-DD` for a day, `YYYY-MM` for a month."""
        return f"{self.base}:agg:{period}:{when}:{dimension}"


def member_of(record: LedgerRecord, dimension: Dimension) -> str:
    return record.key_id if dimension == "key" else str(getattr(record, dimension))


def metric_values(record: LedgerRecord) -> tuple[int, ...]:
    """What one record adds to each counter, in `METRICS` order."""
    return (
        1,
        record.cost_nanousd,
        record.input_tokens,
        record.cached_input_tokens,
        record.cache_write_tokens,
        record.output_tokens,
        record.reasoning_tokens,
        1 if record.estimated else 0,
    )


@dataclass
class Totals:
    """Sums over records: exact cost, counts of requests and tokens by kind."""

    requests: int = 0
    cost_usd: Decimal = Decimal(0)
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: int = 0

    def add_record(self, record: LedgerRecord) -> None:
        # one attribute at a time (not a loop over TOKEN_KINDS): once per record
        self.requests += 1
        self.cost_usd += record.cost
        self.input_tokens += record.input_tokens
        self.cached_input_tokens += record.cached_input_tokens
        self.cache_write_tokens += record.cache_write_tokens
        self.output_tokens += record.output_tokens
        self.reasoning_tokens += record.reasoning_tokens
        if record.estimated:
            self.estimated += 1

    def add_counters(self, counters: dict[str, int]) -> None:
        """Add aggregate counters (metric -> integer, cost in nano-dollars)."""
        self.requests += counters.get("requests", 0)
        self.cost_usd += nanos_to_usd(counters.get("cost_nanousd", 0))
        for kind in TOKEN_KINDS:
            setattr(self, kind, getattr(self, kind) + counters.get(kind, 0))
        self.estimated += counters.get("estimated", 0)

    def add(self, other: Totals) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def as_json(self) -> dict[str, object]:
        """JSON-ready: the cost as an exact decimal string."""
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["cost_usd"] = str(self.cost_usd)
        return out


def parse_aggregate(raw: dict[str, str]) -> dict[str, dict[str, int]]:
    """An aggregate hash as member -> metric -> value."""
    members: dict[str, dict[str, int]] = {}
    for field, value in raw.items():
        metric, _, member = field.partition(FIELD_SEPARATOR)
        members.setdefault(member, {})[metric] = int(value)
    return members
