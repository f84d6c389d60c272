"""Spend read back from the ledger agrees with the records, whichever way it is read."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.cli import spend as spend_cli
from gateway.metering.aggregates import METRICS, LedgerKeys, Totals, metric_values
from gateway.metering.ledger import Ledger, LedgerRecord, LedgerRetention, MemoryLedger
from gateway.metering.ledger_record import TOKEN_KINDS
from gateway.metering.spend import (
    SpendQuery,
    SpendReport,
    parse_time,
    query_memory,
    query_redis,
    report_from_json,
    report_from_records,
)
from gateway.pipeline.stores import open_stores
from gateway.settings.server import StoreSettings
from tests.metering.support import client, make_record, today_midnight
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
TODAY = today_midnight()
YESTERDAY = TODAY - timedelta(days=1)
TOMORROW = TODAY + timedelta(days=1)


def _records(prefix: str) -> list[LedgerRecord]:
    return [make_record(n, YESTERDAY, prefix=prefix) for n in range(120)] + [
        make_record(n, TODAY, prefix=prefix) for n in range(120, 300)
    ]


def _rows(report: SpendReport) -> dict[str, tuple[int, Decimal, int]]:
    return {
        row.group: (row.totals.requests, row.totals.cost_usd, row.totals.output_tokens)
        for row in report.rows
    }


def _write(port: int, keys: LedgerKeys, records: list[LedgerRecord]) -> None:
    async def scenario() -> None:
        redis = client(port)
        ledger = Ledger(redis, keys=keys)
        for record in records:
            ledger.record(record)
        await ledger.close()
        await redis.aclose()

    asyncio.run(scenario())


def _query(port: int, keys: LedgerKeys, query: SpendQuery) -> SpendReport:
    async def scenario() -> SpendReport:
        redis = client(port)
        try:
            return await query_redis(redis, query, keys)
        finally:
            await redis.aclose()

    return asyncio.run(scenario())


QUERIES = [
    # (query, where a whole-day query can be answered from)
    (SpendQuery(since=YESTERDAY, until=TOMORROW, group_by="model"), "aggregates"),
    (SpendQuery(since=YESTERDAY, until=TOMORROW), "aggregates"),
    (SpendQuery(tenant="acme", since=YESTERDAY, until=TOMORROW, group_by="day"), "aggregates"),
    (SpendQuery(key="globex-key-1", since=TODAY, until=TOMORROW), "aggregates"),
    (SpendQuery(since=YESTERDAY, until=TODAY, group_by="provider"), "aggregates"),
    # from a midnight to now: today's counters hold today so far
    (SpendQuery(since=YESTERDAY, group_by="tenant"), "aggregates"),
    (SpendQuery(model="gpt-4.1", since=TODAY, group_by="day"), "aggregates"),
    (SpendQuery(tenant="acme", since=YESTERDAY, until=TOMORROW, group_by="model"), "stream"),
    (SpendQuery(tenant="initech", model="gpt-4.1", group_by="key"), "stream"),
    (SpendQuery(since=YESTERDAY + timedelta(hours=0, seconds=30), group_by="tenant"), "stream"),
]


def test_redis_spend_agrees_with_the_records_from_aggregates_and_stream(
    redis_server: RedisServer,
) -> None:
    keys = LedgerKeys("t-spend")
    records = _records("spend")
    _write(redis_server.port, keys, records)
    for query, source in QUERIES:
        report = _query(redis_server.port, keys, query)
        expected = report_from_records(records, query, "stream")
        assert report.source == source, query
        assert _rows(report) == _rows(expected), query
        assert report.total.cost_usd == expected.total.cost_usd
        assert report.total.requests == sum(query.matches(r) for r in records) > 0


def test_group_by_day_splits_at_utc_midnight(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-days")
    records = _records("days")
    _write(redis_server.port, keys, records)
    report = _query(
        redis_server.port, keys, SpendQuery(since=YESTERDAY, until=TOMORROW, group_by="day")
    )
    assert [(row.group, row.totals.requests) for row in report.rows] == [
        (YESTERDAY.date().isoformat(), 120),
        (TODAY.date().isoformat(), 180),
    ]


def test_whole_months_are_read_from_the_month_counters(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-months")
    records = _records("months")
    _write(redis_server.port, keys, records)
    first = YESTERDAY.replace(day=1)
    end = (TODAY.replace(day=1) + timedelta(days=32)).replace(day=1)

    async def forget_days() -> None:  # as if the day counters had expired
        redis = client(redis_server.port)
        for day in (YESTERDAY, TODAY):
            await redis.delete(keys.aggregate("day", day.date().isoformat(), "model"))
        await redis.aclose()

    asyncio.run(forget_days())
    query = SpendQuery(since=first, until=end, group_by="model")
    report = _query(redis_server.port, keys, query)
    assert report.source == "aggregates"
    assert _rows(report) == _rows(report_from_records(records, query, "stream"))


def test_memory_ledger_spend_agrees_with_its_records_and_counts_each_request_once() -> None:
    ledger = MemoryLedger()
    records = _records("mem")
    for record in records + records[:10]:
        ledger.record(record)
    assert ledger.duplicates_skipped == 10 and ledger.records_written == 300
    query = SpendQuery(group_by="model")
    report = query_memory(ledger, query)
    assert report.source == "memory"
    assert _rows(report) == _rows(report_from_records(records, query, "stream"))
    today = ledger.aggregate("day", TODAY.date().isoformat(), "tenant")
    assert sum(t.requests for t in today.values()) == 180
    month = ledger.aggregate("month", TODAY.strftime("%Y-%m"), "provider")
    if YESTERDAY.month == TODAY.month:
        assert sum((t.cost_usd for t in month.values()), Decimal(0)) == report.total.cost_usd


def test_memory_ledger_keeps_only_the_most_recent_records() -> None:
    ledger = MemoryLedger(max_records=5)
    for n in range(8):
        ledger.record(make_record(n, prefix="ring"))
    assert [r.request_id for r in ledger.records] == [f"ring-{n}" for n in range(3, 8)]


MEMORY_QUERIES = [
    SpendQuery(),
    SpendQuery(group_by="model"),
    SpendQuery(group_by="day"),
    SpendQuery(group_by="provider"),
    SpendQuery(tenant="acme", group_by="key"),
    SpendQuery(tenant="initech", model="gpt-4.1", group_by="key"),
    SpendQuery(key="globex-key-1", since=YESTERDAY, until=TOMORROW, group_by="day"),
    SpendQuery(since=YESTERDAY, until=TODAY, group_by="tenant"),
    SpendQuery(model="deepseek-v3.2", since=TODAY),
    SpendQuery(until=TODAY, group_by="model"),
]


def test_memory_ledger_spend_stays_exact_beyond_the_records_it_keeps() -> None:
    ledger = MemoryLedger(max_records=40)
    records = _records("cap")
    for record in records + records[-5:]:  # the last five twice: kept, so counted once
        ledger.record(record)
    assert [r.request_id for r in ledger.records] == [r.request_id for r in records[-40:]]
    assert (ledger.records_written, ledger.duplicates_skipped) == (300, 5)
    for query in MEMORY_QUERIES:  # whole days: from the per-day totals
        report = query_memory(ledger, query)
        expected = report_from_records(records, query, "memory")
        assert _rows(report) == _rows(expected), query
        assert report.total == expected.total, query
    # a part day is read from the kept records: exact while they reach back to `since`
    since = datetime.fromtimestamp(records[-40].time, UTC)
    for query in (
        SpendQuery(since=since, group_by="model"),
        SpendQuery(since=since, until=TOMORROW, group_by="day"),
        SpendQuery(since=since + timedelta(seconds=5), until=since + timedelta(seconds=20)),
    ):
        report = query_memory(ledger, query)
        expected = report_from_records(records, query, "memory")
        assert report.total == expected.total and report.total.requests > 0, query
        assert _rows(report) == _rows(expected), query
    for period, when in (("day", TODAY.date().isoformat()), ("month", TODAY.strftime("%Y-%m"))):
        for dimension in ("tenant", "key", "model", "provider"):
            aggregate = ledger.aggregate(period, when, dimension)  # type: ignore[arg-type]
            mine = [r for r in records if (r.day if period == "day" else r.month) == when]
            assert sum(t.requests for t in aggregate.values()) == len(mine)
            assert sum((t.cost_usd for t in aggregate.values()), Decimal(0)) == sum(
                (r.cost for r in mine), Decimal(0)
            )


def test_totals_of_a_record_equal_the_counters_it_adds() -> None:
    for n in (0, 17, 42):
        record = make_record(n, prefix="totals")
        by_record, by_counters = Totals(), Totals()
        by_record.add_record(record)
        by_counters.add_counters(dict(zip(METRICS, metric_values(record), strict=True)))
        assert by_record == by_counters
        assert by_record.as_json() == {
            "requests": 1,
            "cost_usd": record.cost_usd,
            **{kind: getattr(record, kind) for kind in TOKEN_KINDS},
            "estimated": int(record.estimated),
        }


def test_the_memory_store_keeps_the_configured_number_of_ledger_records() -> None:
    stores = asyncio.run(open_stores(StoreSettings(memory_ledger_records=7)))
    assert stores.memory_ledger is not None and stores.memory_ledger.max_records == 7
    assert StoreSettings().memory_ledger_records == 10_000


def test_report_json_carries_exact_decimal_strings() -> None:
    records = [make_record(n, TODAY, prefix="json") for n in range(3)]
    body = report_from_records(records, SpendQuery(group_by="tenant"), "memory").as_json()
    total = body["total"]
    assert isinstance(total, dict)
    assert Decimal(str(total["cost_usd"])) == sum((r.cost for r in records), Decimal(0))
    assert body["query"] == {
        "tenant": None,
        "key": None,
        "model": None,
        "since": None,
        "until": None,
        "group_by": "tenant",
    }


def test_parse_time_reads_durations_and_dates() -> None:
    now = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    assert parse_time("7d", now) == datetime(2026, 11, 23, 6, 0, tzinfo=UTC)
    assert parse_time("90m", now) == datetime(2026, 11, 30, 4, 30, tzinfo=UTC)
    assert parse_time("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="7d"):
        parse_time("last week", now)


def _config(tmp_path: Path, port: int | None, prefix: str) -> Path:
    store = (
        f"store:\n  kind: redis\n  redis_url: redis://127.0.0.1:{port}/0\n  key_prefix: {prefix}\n"
        if port
        else "store:\n  kind: memory\n"
    )
    path = tmp_path / "gateway.yaml"
    path.write_text(store + "policies: []\n", encoding="utf-8")
    return path


def _run_cli(*args: str, subprocess_if_possible: bool = False) -> subprocess.CompletedProcess[str]:
    """`gateway spend ...`: as a real process through `gateway.cli.main` when asked and it
    exists (slow: it imports the whole gateway), else through argparse in this process."""
    if subprocess_if_possible and (ROOT / "gateway" / "cli" / "main.py").exists():
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli.main", "spend", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    parser = argparse.ArgumentParser(prog="gateway")
    spend_cli.register(parser.add_subparsers())
    out, err = io.StringIO(), io.StringIO()
    code = spend_cli.run(parser.parse_args(["spend", *args]), out, err)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_cli_csv_agrees_with_the_ledger_to_the_cent(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    keys = LedgerKeys("t-cli")
    records = _records("cli")
    _write(redis_server.port, keys, records)
    config = _config(tmp_path, redis_server.port, "t-cli")
    done = _run_cli(
        "--config",
        str(config),
        "--since",
        "2d",
        "--group-by",
        "model",
        "--csv",
        subprocess_if_possible=True,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(done.stdout))}
    for model in {r.model for r in records}:
        exact = sum((r.cost for r in records if r.model == model), Decimal(0))
        assert Decimal(rows[model]["cost_usd"]) == exact
        assert int(rows[model]["requests"]) == sum(r.model == model for r in records)
    assert Decimal(rows["total"]["cost_usd"]).quantize(Decimal("0.01")) == sum(
        (r.cost for r in records), Decimal(0)
    ).quantize(Decimal("0.01"))


def test_cli_table_shows_one_row_per_group_and_the_total(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    keys = LedgerKeys("t-table")
    records = _records("table")
    _write(redis_server.port, keys, records)
    config = _config(tmp_path, redis_server.port, "t-table")
    done = _run_cli("--config", str(config), "--tenant", "acme", "--group-by", "provider")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[0] == "provider" and "cost (USD)" in lines[0]
    providers = {r.provider for r in records if r.tenant == "acme"}
    body = [line.split()[0] for line in lines[2:] if not line.startswith("-")]
    assert set(body) == providers | {"total"}
    total = sum((r.cost for r in records if r.tenant == "acme"), Decimal(0))
    assert lines[-1].split()[-1] == str(total.quantize(Decimal("0.000001")))


def test_cli_says_there_is_no_shared_ledger_with_the_memory_store(tmp_path: Path) -> None:
    done = _run_cli("--config", str(_config(tmp_path, None, "gw")))
    assert done.returncode == 1
    assert "no shared ledger" in done.stderr and done.stdout == ""


def test_cli_does_not_print_the_redis_url_when_redis_is_unreachable(tmp_path: Path) -> None:
    from tests.support.redis_server import free_port

    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"store:\n  kind: redis\n  redis_url: redis://:s3cret@127.0.0.1:{free_port()}/0\n",
        encoding="utf-8",
    )
    done = _run_cli("--config", str(config))
    assert done.returncode == 1
    assert "store.redis_url" in done.stderr and "s3cret" not in done.stderr + done.stdout


def _write_capped(port: int, keys: LedgerKeys, records: list[LedgerRecord], cap: int) -> None:
    async def scenario() -> None:
        redis = client(port)
        ledger = Ledger(redis, keys=keys, retention=LedgerRetention(stream_max_records=cap))
        for record in records:
            ledger.record(record)
        await ledger.close()
        await redis.aclose()

    asyncio.run(scenario())


def test_whole_days_stay_exact_past_a_capped_stream_and_a_stream_report_says_where_it_starts(
    redis_db: RedisServer, tmp_path: Path
) -> None:
    """A stream capped at 1,000 of 2,400 records: spend over whole UTC days is still every
    record (the counters); a report from the stream counts what it holds and says, in
    `stream_starts` and in the CLI's note, from when."""
    keys = LedgerKeys("t-capped")
    records = [make_record(n, YESTERDAY, prefix="capped") for n in range(1_200)] + [
        make_record(n, TODAY, prefix="capped") for n in range(1_200, 2_400)
    ]
    _write_capped(redis_db.port, keys, records, cap=1_000)

    for whole_days_query in (
        SpendQuery(since=YESTERDAY, until=TOMORROW),
        SpendQuery(since=YESTERDAY, group_by="day"),  # to now: as the console asks
    ):
        whole_days = _query(redis_db.port, keys, whole_days_query)
        assert whole_days.source == "aggregates" and whole_days.stream_starts is None
        assert whole_days.total.requests == 2_400
        assert whole_days.total.cost_usd == sum((r.cost for r in records), Decimal(0))

    everything = _query(redis_db.port, keys, SpendQuery(group_by="tenant"))
    assert everything.source == "stream"
    assert 1_000 <= everything.total.requests < 1_100  # approximate trimming: whole nodes
    assert everything.stream_starts is not None
    assert everything.stream_starts <= datetime.now(UTC)
    assert everything.as_json()["stream_starts"] == everything.stream_starts.isoformat()
    # a range that starts after the stream's oldest entry is complete: no note
    recent = SpendQuery(since=everything.stream_starts + timedelta(seconds=1), group_by="tenant")
    assert _query(redis_db.port, keys, recent).stream_starts is None

    done = _run_cli("--config", str(_config(tmp_path, redis_db.port, "t-capped")))
    assert done.returncode == 0, done.stderr
    assert "note: the ledger's records start at" in done.stderr
    assert "store.ledger_stream_max_records" in done.stderr


def test_a_stream_that_let_nothing_go_has_no_start_to_report(redis_db: RedisServer) -> None:
    keys = LedgerKeys("t-uncapped")
    _write(redis_db.port, keys, _records("uncapped"))
    report = _query(redis_db.port, keys, SpendQuery(group_by="tenant"))
    assert report.source == "stream" and report.total.requests == 300
    assert report.stream_starts is None and report.as_json()["stream_starts"] is None
    # no stream at all (nothing written under this prefix): no start either
    empty = _query(redis_db.port, LedgerKeys("t-never"), SpendQuery(group_by="tenant"))
    assert empty.total.requests == 0 and empty.stream_starts is None


def test_stream_starts_round_trips_through_the_admin_json() -> None:
    starts = datetime(2026, 12, 6, 20, 0, 1, tzinfo=UTC)
    query = SpendQuery(group_by="tenant")
    report = SpendReport(query, [], "stream", stream_starts=starts)
    assert report_from_json(report.as_json(), query).stream_starts == starts
