"""Reading spend back: filters and a grouping over the ledger, totals in exact decimals.

A query is answered from the aggregate counters when they hold exactly what it asks
(whole UTC days, from a midnight to another or to now, at most one of tenant/key/model
as filter, grouped by that dimension, by day or not at all; whole calendar months are
read from the month counters, which outlive the day ones), else from the records in the
Redis Stream. The stream keeps the last `store.ledger_stream_retention_seconds` and at
most about `store.ledger_stream_max_records` records; older spend lives only in the
aggregates, and a report from the stream says in `stream_starts` when its range reaches
back past what the stream still holds. Each stream entry has one field, `record`: the
`LedgerRecord` as JSON. The in-memory ledger answers whole UTC days from its per-day
totals (every record it ever took) and part days from the records it keeps (the most
recent `store.memory_ledger_records`). `SpendReport.source` says which was used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import ResponseError

from gateway.metering.aggregates import (
    Dimension,
    LedgerKeys,
    Period,
    Totals,
    member_of,
    parse_aggregate,
)
from gateway.metering.ledger_record import LedgerRecord
from gateway.metering.memory_ledger import MemoryLedger

GroupBy = Literal["tenant", "key", "model", "provider", "day"]
GROUP_BYS: tuple[GroupBy, ...] = ("tenant", "key", "model", "provider", "day")
Source = Literal["stream", "aggregates", "memory"]
STREAM_PAGE = 1000

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


@dataclass(frozen=True)
class SpendQuery:
    """Filters (None: any), a half-open time range [since, until) and a grouping."""

    tenant: str | None = None
    key: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    group_by: GroupBy | None = None

    def matches(self, record: LedgerRecord) -> bool:
        if self.tenant is not None and record.tenant != self.tenant:
            return False
        if self.key is not None and record.key_id != self.key:
            return False
        if self.model is not None and record.model != self.model:
            return False
        if self.since is not None and record.time < self.since.timestamp():
            return False
        return self.until is None or record.time < self.until.timestamp()

    def group_of(self, record: LedgerRecord) -> str:
        if self.group_by is None:
            return "total"
        if self.group_by == "day":
            return record.day
        return member_of(record, self.group_by)

    def as_json(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "key": self.key,
            "model": self.model,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "group_by": self.group_by,
        }


@dataclass(frozen=True)
class SpendRow:
    group: str
    totals: Totals

    def as_json(self) -> dict[str, object]:
        return {"group": self.group, **self.totals.as_json()}


@dataclass(frozen=True)
class SpendReport:
    query: SpendQuery
    rows: list[SpendRow]
    source: Source
    total: Totals = field(default_factory=Totals)
    # a report read from the stream, when the stream has let records go (by age or by
    # `store.ledger_stream_max_records`) and the query's range starts before the oldest
    # one it holds: the report counts only records from this time on
    stream_starts: datetime | None = None

    def as_json(self) -> dict[str, object]:
        """The `/admin/spend` body: costs as exact decimal strings."""
        return {
            "query": self.query.as_json(),
            "source": self.source,
            "stream_starts": self.stream_starts.isoformat() if self.stream_starts else None,
            "rows": [row.as_json() for row in self.rows],
            "total": self.total.as_json(),
        }


def report_from_json(body: dict[str, Any], query: SpendQuery) -> SpendReport:
    """A report read back from its `/admin/spend` JSON (`SpendReport.as_json`)."""
    rows_json = body.get("rows")
    rows = [
        SpendRow(str(row.get("group")), totals_from_json(row))
        for row in (rows_json if isinstance(rows_json, list) else [])
        if isinstance(row, dict)
    ]
    total = body.get("total")
    source: Source = body.get("source", "memory")
    starts = body.get("stream_starts")
    return SpendReport(
        query,
        rows,
        source if source in ("stream", "aggregates", "memory") else "memory",
        totals_from_json(total if isinstance(total, dict) else {}),
        datetime.fromisoformat(starts) if isinstance(starts, str) else None,
    )


def totals_from_json(data: dict[str, Any]) -> Totals:
    totals = Totals()
    for name in ("requests", *TOKEN_FIELDS, "estimated"):
        setattr(totals, name, int(data.get(name) or 0))
    totals.cost_usd = Decimal(str(data.get("cost_usd") or "0"))
    return totals


TOKEN_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)


def parse_time(text: str, now: datetime) -> datetime:
    """`7d`, `12h`, `30m`, `2w` (that long before `now`), or an ISO date or time (UTC
    unless it names a zone)."""
    duration = _DURATION.match(text.strip())
    if duration:
        return now - timedelta(seconds=int(duration[1]) * _UNIT_SECONDS[duration[2]])
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"cannot read time {text!r}: use a duration like 7d, 12h, 30m, "
            "or a date like 2026-11-01"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def report_from_records(
    records: Iterable[LedgerRecord], query: SpendQuery, source: Source
) -> SpendReport:
    groups: dict[str, Totals] = {}
    for record in records:
        if query.matches(record):
            groups.setdefault(query.group_of(record), Totals()).add_record(record)
    return _report(query, groups, source)


def query_memory(ledger: MemoryLedger, query: SpendQuery) -> SpendReport:
    """The whole UTC days in the query's range from the ledger's per-day totals (exact
    however many records it has let go), the part days at either end from its records."""
    first, end = _whole_days(query)

    def whole(day: str) -> bool:
        return (first is None or day >= first) and (end is None or day < end)

    groups: dict[str, Totals] = {}
    for (day, tenant, key, model, provider), totals in ledger.day_totals():
        if not whole(day):
            continue
        if query.tenant is not None and tenant != query.tenant:
            continue
        if query.key is not None and key != query.key:
            continue
        if query.model is not None and model != query.model:
            continue
        if query.group_by is None:
            group = "total"
        elif query.group_by == "day":
            group = day
        else:
            group = {"tenant": tenant, "key": key, "model": model, "provider": provider}[
                query.group_by
            ]
        groups.setdefault(group, Totals()).add(totals)
    for record in ledger.records:
        if not whole(record.day) and query.matches(record):
            groups.setdefault(query.group_of(record), Totals()).add_record(record)
    return _report(query, groups, "memory")


def _whole_days(query: SpendQuery) -> tuple[str | None, str | None]:
    """The first whole UTC day in [since, until) and the day after the last (None: no
    bound); `first >= end` when the range holds no whole day."""
    first = end = None
    if query.since is not None:
        since = query.since.astimezone(UTC)
        day = since.date()
        first = (day if _is_midnight(since) else day + timedelta(days=1)).isoformat()
    if query.until is not None:
        end = query.until.astimezone(UTC).date().isoformat()
    return first, end


async def query_redis(
    redis: Redis | RedisCluster, query: SpendQuery, keys: LedgerKeys | None = None
) -> SpendReport:
    keys = keys or LedgerKeys()
    dimension = _aggregate_dimension(query)
    if dimension is not None:
        return await _from_aggregates(redis, keys, query, dimension)
    records = await _stream_records(redis, keys, query)
    report = report_from_records(records, query, "stream")
    starts = await _stream_starts(redis, keys, query)
    return replace(report, stream_starts=starts) if starts is not None else report


def _aggregate_dimension(query: SpendQuery) -> Dimension | None:
    """The dimension whose counters answer the query exactly, if there is one. A range
    from a UTC midnight to now (no `until`) is whole days too: today's counters hold
    today so far."""
    if not (_is_midnight(query.since) and (query.until is None or _is_midnight(query.until))):
        return None
    candidates: tuple[tuple[Dimension, str | None], ...] = (
        ("tenant", query.tenant),
        ("key", query.key),
        ("model", query.model),
    )
    filters = [dimension for dimension, value in candidates if value is not None]
    if len(filters) > 1:
        return None
    if filters:
        return filters[0] if query.group_by in (None, "day", filters[0]) else None
    if query.group_by is not None and query.group_by != "day":
        return query.group_by
    return "tenant"  # every record has one tenant: summing them gives the total


async def _from_aggregates(
    redis: Redis | RedisCluster, keys: LedgerKeys, query: SpendQuery, dimension: Dimension
) -> SpendReport:
    assert query.since is not None
    wanted = {"tenant": query.tenant, "key": query.key, "model": query.model}.get(dimension)
    first = query.since.astimezone(UTC).date()
    if query.until is not None:
        end = query.until.astimezone(UTC).date()
    else:  # up to now: today's counters are its records so far
        end = datetime.now(UTC).date() + timedelta(days=1)
    periods = _periods(first, end, whole_months=query.group_by != "day")
    async with redis.pipeline(transaction=False) as pipe:
        for period, when in periods:
            pipe.hgetall(keys.aggregate(period, when, dimension))
        hashes = await pipe.execute()
    groups: dict[str, Totals] = {}
    for (_, when), raw in zip(periods, hashes, strict=True):
        for member, counters in parse_aggregate(_decode_map(raw)).items():
            if wanted is not None and member != wanted:
                continue
            if query.group_by == "day":
                group = when
            elif query.group_by is None:
                group = "total"
            else:
                group = member
            groups.setdefault(group, Totals()).add_counters(counters)
    return _report(query, groups, "aggregates")


def _periods(first: date, end: date, whole_months: bool) -> list[tuple[Period, str]]:
    """The counters covering the days [first, end): whole months as one month counter
    when allowed (day counters expire sooner), the other days one by one."""
    periods: list[tuple[Period, str]] = []
    day = first
    while day < end:
        following = _next_month(day)
        if whole_months and day.day == 1 and following <= end:
            periods.append(("month", day.strftime("%Y-%m")))
            day = following
        else:
            periods.append(("day", day.isoformat()))
            day += timedelta(days=1)
    return periods


def _next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


async def _stream_records(
    redis: Redis | RedisCluster, keys: LedgerKeys, query: SpendQuery
) -> list[LedgerRecord]:
    # entry ids are write times, never earlier than the record's own time
    start = f"{int(query.since.timestamp() * 1000)}-0" if query.since else "-"
    records: list[LedgerRecord] = []
    while True:
        page = await redis.xrange(keys.stream, min=start, max="+", count=STREAM_PAGE) or []
        for _entry_id, fields in page:
            record = LedgerRecord.from_json(_entry_record(fields or {}))
            if query.matches(record):
                records.append(record)
        if len(page) < STREAM_PAGE:
            return records
        start = "(" + _text(page[-1][0] or b"")


async def _stream_starts(
    redis: Redis | RedisCluster, keys: LedgerKeys, query: SpendQuery
) -> datetime | None:
    """When the stream has let records go and the query's range reaches back before
    its oldest entry: that entry's time (entry ids are write times). Redis before 7.0
    does not count the entries ever added, and None is the answer there."""
    try:
        info = await redis.xinfo_stream(keys.stream)
    except ResponseError:  # no stream yet: nothing was ever written, nothing let go
        return None
    added, length = info.get("entries-added"), info.get("length")
    first = info.get("first-entry")
    if added is None or length is None or int(added) <= int(length) or not first:
        return None
    oldest = datetime.fromtimestamp(int(_text(first[0]).partition("-")[0]) / 1000, UTC)
    if query.since is not None and query.since >= oldest:
        return None
    return oldest


def _report(query: SpendQuery, groups: dict[str, Totals], source: Source) -> SpendReport:
    if query.group_by == "day":
        ordered = sorted(groups.items())
    else:
        ordered = sorted(groups.items(), key=lambda item: (-item[1].cost_usd, item[0]))
    total = Totals()
    for _, totals in ordered:
        total.add(totals)
    return SpendReport(query, [SpendRow(g, t) for g, t in ordered], source, total)


def _is_midnight(moment: datetime | None) -> bool:
    if moment is None:
        return False
    utc = moment.astimezone(UTC)
    return (utc.hour, utc.minute, utc.second, utc.microsecond) == (0, 0, 0, 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry_record(fields: dict[Any, Any]) -> bytes | str:
    """A stream entry's `record` field, whether the client decodes responses or not."""
    found = fields.get(b"record", fields.get("record"))
    if not isinstance(found, bytes | str):
        raise ValueError("ledger stream entry without a `record` field")
    return found


def _decode_map(raw: dict[Any, Any]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}
