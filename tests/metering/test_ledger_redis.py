"""The Redis ledger against a real redis-server: batched, idempotent, never lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.metering.aggregates import LedgerKeys, member_of, parse_aggregate
from gateway.metering.ledger import Ledger, LedgerRecord, LedgerRetention
from gateway.metering.ledger_record import nanos_to_usd
from tests.metering.support import ReplyLosingProxy, client, make_record
from tests.support.redis_server import RedisServer


async def _stream_records(redis: Redis, keys: LedgerKeys) -> list[LedgerRecord]:
    entries = await redis.xrange(keys.stream)
    return [LedgerRecord.from_json(fields[b"record"]) for _, fields in entries]


async def _eventually(check: Callable[[], Awaitable[bool]], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def _tenant_counters(redis: Redis, keys: LedgerKeys, day: str) -> dict[str, dict[str, int]]:
    raw = await redis.hgetall(keys.aggregate("day", day, "tenant"))
    return parse_aggregate({k.decode(): v.decode() for k, v in raw.items()})


def test_records_land_in_the_stream_and_counters_in_one_batched_flush(
    redis_server: RedisServer,
) -> None:
    keys = LedgerKeys("t-batch")
    records = [make_record(n, prefix="batch") for n in range(300)]

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys, batch_size=100)
        for record in records:
            ledger.record(record)
        assert ledger.queue_depth == 300  # nothing written before the writer runs
        await ledger.flush()
        assert ledger.queue_depth == 0 and ledger.records_written == 300
        assert await _stream_records(redis, keys) == records
        counters = await _tenant_counters(redis, keys, records[0].day)
        assert sum(c["requests"] for c in counters.values()) == 300
        assert sum(c["output_tokens"] for c in counters.values()) == sum(
            r.output_tokens for r in records
        )
        for dimension in ("tenant", "key", "model", "provider"):
            for period, when in (("day", records[0].day), ("month", records[0].month)):
                assert await redis.ttl(keys.aggregate(period, when, dimension)) > 0  # type: ignore[arg-type]
        assert await redis.ttl(keys.seen(records[0].request_id)) > 0
        await redis.aclose()

    asyncio.run(scenario())


def test_aggregates_equal_the_sum_of_the_records_to_the_cent(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-sum")
    records = [make_record(n, prefix="sum") for n in range(500)]

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys)
        for record in records:
            ledger.record(record)
        await ledger.flush()
        exact = sum((r.cost for r in records), Decimal(0))
        for dimension in ("tenant", "key", "model", "provider"):
            raw = await redis.hgetall(keys.aggregate("month", records[0].month, dimension))
            counters = parse_aggregate({k.decode(): v.decode() for k, v in raw.items()})
            total = nanos_to_usd(sum(c["cost_nanousd"] for c in counters.values()))
            # nano-dollars hold these prices exactly, so equal to the cent and beyond
            assert total == exact
            assert sum(c["estimated"] for c in counters.values()) == sum(
                r.estimated for r in records
            )
        per_model = {
            member: nanos_to_usd(c["cost_nanousd"])
            for member, c in parse_aggregate(
                {
                    k.decode(): v.decode()
                    for k, v in (
                        await redis.hgetall(keys.aggregate("day", records[0].day, "model"))
                    ).items()
                }
            ).items()
        }
        assert per_model["deepseek-v3.2"] == sum(
            (r.cost for r in records if r.model == "deepseek-v3.2"), Decimal(0)
        )
        await redis.aclose()

    asyncio.run(scenario())


def test_a_flush_retried_after_a_lost_reply_writes_each_record_once(
    redis_server: RedisServer,
) -> None:
    keys = LedgerKeys("t-retry")
    records = [make_record(n, prefix="retry") for n in range(200)]

    async def scenario() -> None:
        direct = client(redis_server.port)
        proxy = ReplyLosingProxy(redis_server.port)
        await proxy.start()
        through_proxy = client(proxy.port)
        ledger = Ledger(through_proxy, keys=keys, batch_size=200)
        await through_proxy.script_load(_script())  # so the first flush runs the script
        for record in records:
            ledger.record(record)

        proxy.lose_replies = True
        with pytest.raises(RedisConnectionError):
            await ledger.flush()
        assert ledger.queue_depth == 200  # not acknowledged: still queued

        async def all_written() -> bool:
            return int(await direct.xlen(keys.stream)) == 200

        await _eventually(all_written)  # ...yet Redis executed every write

        proxy.lose_replies = False
        await ledger.flush()
        assert ledger.queue_depth == 0
        assert ledger.duplicates_skipped == 200 and ledger.records_written == 0
        assert await direct.xlen(keys.stream) == 200
        counters = await _tenant_counters(direct, keys, records[0].day)
        assert sum(c["requests"] for c in counters.values()) == 200
        await through_proxy.aclose()
        await direct.aclose()
        await proxy.stop()

    asyncio.run(scenario())


def test_two_writers_recording_the_same_request_count_it_once(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-twice")
    records = [make_record(n, prefix="twice") for n in range(50)]

    async def scenario() -> None:
        redis = client(redis_server.port)
        first, second = Ledger(redis, keys=keys), Ledger(redis, keys=keys)
        for record in records:
            first.record(record)
            second.record(record)
        await asyncio.gather(first.flush(), second.flush())
        assert first.records_written + second.records_written == 50
        assert first.duplicates_skipped + second.duplicates_skipped == 50
        assert await redis.xlen(keys.stream) == 50
        await redis.aclose()

    asyncio.run(scenario())


def test_the_same_request_twice_in_one_batch_is_written_once(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-inbatch")
    record = make_record(7, prefix="inbatch")

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys)
        ledger.record(record)
        ledger.record(record)
        await ledger.flush()
        assert (ledger.records_written, ledger.duplicates_skipped) == (1, 1)
        assert await redis.xlen(keys.stream) == 1
        counters = await _tenant_counters(redis, keys, record.day)
        assert counters[record.tenant]["requests"] == 1
        assert counters[record.tenant]["cost_nanousd"] == record.cost_nanousd
        await redis.aclose()

    asyncio.run(scenario())


def test_a_batch_mixing_written_and_new_records_counts_only_the_new_ones(
    redis_server: RedisServer,
) -> None:
    keys = LedgerKeys("t-mixed")
    yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    yesterday -= timedelta(days=1)
    # two days and every tenant, model and key: many groups per batch
    records = [make_record(n, prefix="mixed") for n in range(150)]
    records += [make_record(n, yesterday, prefix="mixed-y") for n in range(150)]

    async def scenario() -> None:
        redis = client(redis_server.port)
        first = Ledger(redis, keys=keys)
        for record in records[:60] + records[150:210]:
            first.record(record)
        await first.flush()
        # a second writer's batch repeats some of those, some twice, between new ones
        second = Ledger(redis, keys=keys, batch_size=400)
        for record in records[30:] + records[100:120] + records[140:160]:
            second.record(record)
        await second.flush()
        assert first.records_written + second.records_written == 300
        assert second.duplicates_skipped == 30 + 60 + 20 + 20
        assert sorted(r.request_id for r in await _stream_records(redis, keys)) == sorted(
            r.request_id for r in records
        )
        for when in (records[0].day, records[150].day):
            day = [r for r in records if r.day == when]
            for dimension in ("tenant", "key", "model", "provider"):
                raw = await redis.hgetall(keys.aggregate("day", when, dimension))  # type: ignore[arg-type]
                counters = parse_aggregate({k.decode(): v.decode() for k, v in raw.items()})
                for member, values in counters.items():
                    mine = [r for r in day if member_of(r, dimension) == member]  # type: ignore[arg-type]
                    assert values["requests"] == len(mine)
                    assert values["cost_nanousd"] == sum(r.cost_nanousd for r in mine)
                    assert values.get("output_tokens", 0) == sum(r.output_tokens for r in mine)
                    assert values.get("estimated", 0) == sum(r.estimated for r in mine)
                assert sum(v["requests"] for v in counters.values()) == len(day)
        await redis.aclose()

    asyncio.run(scenario())


def test_a_script_redis_forgot_is_loaded_again_and_writes_once(
    fresh_redis: RedisServer,
) -> None:
    keys = LedgerKeys("t-noscript")
    records = [make_record(n, prefix="noscript") for n in range(40)]

    async def scenario() -> None:
        redis = client(fresh_redis.port)
        ledger = Ledger(redis, keys=keys)
        for record in records[:20]:
            ledger.record(record)
        await ledger.flush()
        await redis.script_flush()  # as after a restart without persistence of scripts
        for record in records:
            ledger.record(record)
        await ledger.flush()
        assert (ledger.records_written, ledger.duplicates_skipped) == (40, 20)
        counters = await _tenant_counters(redis, keys, records[0].day)
        assert sum(c["requests"] for c in counters.values()) == 40
        await redis.aclose()

    asyncio.run(scenario())


def test_counters_stay_exact_integers_beyond_fifteen_digits(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-big")
    # $123,456.789012345 per request: 123,456,789,012,345 nano-dollars (15 digits)
    records = [
        msgspec.structs.replace(
            make_record(n, prefix="big"), cost_usd="123456.789012345", tenant="whale"
        )
        for n in range(3)
    ]

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys)
        for record in records:
            ledger.record(record)
        await ledger.flush()
        counters = await _tenant_counters(redis, keys, records[0].day)
        assert nanos_to_usd(counters["whale"]["cost_nanousd"]) == Decimal("370370.367037035")
        await redis.aclose()

    asyncio.run(scenario())


def test_redis_killed_mid_load_and_restarted_loses_nothing_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    server = RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
    server.start()
    keys = LedgerKeys("t-kill")
    total = 3000

    async def scenario() -> None:
        redis = client(server.port)
        ledger = Ledger(
            redis,
            keys=keys,
            queue_size=400,
            batch_size=50,
            flush_interval=0.01,
            max_retry_delay=0.05,
            spill_dir=tmp_path,
        )
        await ledger.start()
        for n in range(total):
            ledger.record(make_record(n, prefix="kill"))
            if n % 25 == 0:
                await asyncio.sleep(0.002)  # a steady request rate
            if n == 1000:
                await asyncio.to_thread(server.stop, True)
            if n == 2200:
                await asyncio.to_thread(server.start)
        assert ledger.write_failures > 0
        assert ledger.records_spilled > 0  # the outage outlasted the in-memory queue

        async def caught_up() -> bool:
            return ledger.queue_depth == 0 and ledger.records_replayed >= ledger.records_spilled

        await _eventually(caught_up)
        await ledger.close()
        written = await _stream_records(redis, keys)
        ids = [r.request_id for r in written]
        assert len(ids) == len(set(ids)) == total
        counters = await _tenant_counters(redis, keys, written[0].day)
        assert sum(c["requests"] for c in counters.values()) == total
        assert nanos_to_usd(sum(c["cost_nanousd"] for c in counters.values())) == sum(
            (r.cost for r in written), Decimal(0)
        )
        await redis.aclose()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
    assert list(tmp_path.iterdir()) == []  # every spill file replayed and removed


def test_close_flushes_a_full_queue(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-close")

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys, queue_size=2000, batch_size=128, flush_interval=60)
        await ledger.start()
        for n in range(2000):
            ledger.record(make_record(n, prefix="close"))
        await ledger.close()
        assert ledger.queue_depth == 0 and ledger.records_written == 2000
        assert ledger.records_spilled == 0 and ledger.records_dropped == 0
        assert await redis.xlen(keys.stream) == 2000
        await redis.aclose()

    asyncio.run(scenario())


def test_close_while_redis_is_down_spills_and_the_next_writer_replays(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    keys = LedgerKeys("t-spill")
    records = [make_record(n, prefix="spill") for n in range(120)]

    async def scenario() -> None:
        redis = client(fresh_redis.port)
        fresh_redis.stop(kill=True)
        ledger = Ledger(redis, keys=keys, queue_size=100, spill_dir=tmp_path, max_retry_delay=0.05)
        await ledger.start()
        for record in records:
            ledger.record(record)
        await ledger.close(grace_seconds=0.3)
        assert ledger.records_spilled == 120 and ledger.records_dropped == 0
        assert ledger.write_failures > 0

        fresh_redis.start()
        successor = Ledger(redis, keys=keys, spill_dir=tmp_path, flush_interval=0.01)
        await successor.start()

        async def replayed() -> bool:
            return successor.records_replayed == 120

        await _eventually(replayed)
        await successor.close()
        assert sorted(r.request_id for r in await _stream_records(redis, keys)) == sorted(
            r.request_id for r in records
        )
        await redis.aclose()

    asyncio.run(scenario())
    assert list(tmp_path.iterdir()) == []


def test_a_full_queue_without_a_spill_directory_counts_what_it_drops(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=LedgerKeys("t-drop"), queue_size=10)
        for n in range(15):
            ledger.record(make_record(n, prefix="drop"))
        assert ledger.queue_depth == 10 and ledger.records_dropped == 5
        await ledger.close()
        assert ledger.records_written == 10
        await redis.aclose()

    asyncio.run(scenario())


def test_records_round_trip_through_json() -> None:
    record = make_record(3)
    assert LedgerRecord.from_json(record.to_json()) == record
    assert make_record(2).ttft_ms is None
    assert LedgerRecord.from_json(make_record(2).to_json()) == make_record(2)
    assert record.tokens_by_kind() == {
        "input": record.input_tokens,
        "cached_input": record.cached_input_tokens,
        "cache_write": record.cache_write_tokens,
        "output": record.output_tokens,
        "reasoning": record.reasoning_tokens,
    }


def _script() -> str:
    from gateway.metering.ledger import WRITE_SCRIPT

    return WRITE_SCRIPT


def test_requests_sharing_a_client_request_id_are_each_written(redis_server: RedisServer) -> None:
    """A client may send one `x-request-id` (a tracing id) with many requests: each is
    billed; only a retried write of the same record is recognised as one."""
    keys = LedgerKeys("t-shared-id")
    base = make_record(3, prefix="trace")
    first = msgspec.structs.replace(base, record_id="req_gw01")
    second = msgspec.structs.replace(base, record_id="req_gw02")

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys)
        ledger.record(first)
        ledger.record(second)
        ledger.record(second)  # the same record again: written once
        await ledger.flush()
        assert (ledger.records_written, ledger.duplicates_skipped) == (2, 1)
        assert await redis.xlen(keys.stream) == 2
        counters = await _tenant_counters(redis, keys, base.day)
        assert counters[base.tenant]["requests"] == 2
        assert counters[base.tenant]["cost_nanousd"] == 2 * base.cost_nanousd
        await redis.aclose()

    asyncio.run(scenario())


# Redis's default stream-node-max-entries: an approximate trim (~) drops whole nodes only
STREAM_NODE_ENTRIES = 100


def test_a_capped_stream_keeps_about_its_cap_of_the_newest_records_and_counters_keep_all(
    redis_db: RedisServer,
) -> None:
    """With `stream_max_records` N, five times N records leave between N and N plus a
    stream node in the stream, the newest ones, while the day counters count every one."""
    keys = LedgerKeys("t-cap")
    cap = 500
    records = [make_record(n, prefix="cap") for n in range(5 * cap)]

    async def scenario() -> None:
        redis = client(redis_db.port)
        ledger = Ledger(redis, keys=keys, retention=LedgerRetention(stream_max_records=cap))
        for record in records:
            ledger.record(record)
        await ledger.flush()
        assert ledger.records_written == 5 * cap
        kept = await _stream_records(redis, keys)
        assert cap <= len(kept) < cap + STREAM_NODE_ENTRIES
        assert kept == records[-len(kept) :]  # the oldest went, in order
        counters = await _tenant_counters(redis, keys, records[0].day)
        assert sum(c["requests"] for c in counters.values()) == 5 * cap
        assert sum(c["cost_nanousd"] for c in counters.values()) == sum(
            r.cost_nanousd for r in records
        )
        await redis.aclose()

    asyncio.run(scenario())


def test_stream_entries_older_than_the_retention_are_trimmed_by_the_next_write(
    redis_db: RedisServer,
) -> None:
    """Entries written an hour ago (ids are write times) go with a 60 s retention; the
    age bound trims even a stream far under its record cap."""
    keys = LedgerKeys("t-age")
    hour_ago_ms = int((time.time() - 3600) * 1000)
    fresh = [make_record(n, prefix="age") for n in range(10)]

    async def scenario() -> None:
        redis = client(redis_db.port)
        for n in range(3 * STREAM_NODE_ENTRIES):  # three whole nodes of old entries
            await redis.xadd(keys.stream, {"record": b"{}"}, id=f"{hour_ago_ms}-{n}")
        retention = LedgerRetention(stream_seconds=60, stream_max_records=1_000_000)
        ledger = Ledger(redis, keys=keys, retention=retention)
        for record in fresh:
            ledger.record(record)
        await ledger.flush()
        assert await _stream_records(redis, keys) == fresh
        await redis.aclose()

    asyncio.run(scenario())


def test_a_ledger_refuses_a_retention_that_keeps_nothing(redis_db: RedisServer) -> None:
    redis = client(redis_db.port)
    for retention in (
        LedgerRetention(stream_max_records=0),
        LedgerRetention(stream_max_records=-5),
        LedgerRetention(stream_seconds=0),
    ):
        with pytest.raises(ValueError, match="retention"):
            Ledger(redis, retention=retention)


def test_a_steady_stream_of_records_is_written_in_interval_batches_not_chased(
    fresh_redis: RedisServer,
) -> None:
    """Records keep coming while a batch is on its way: they wait for the next wake-up.
    A writer that wrote on while its queue was not empty sent the one or two records that
    came in during each round trip, a script call (and ~45 fixed Redis commands) each."""
    keys = LedgerKeys("t-steady")

    async def scenario() -> tuple[int, int]:
        redis = client(fresh_redis.port)
        ledger = Ledger(redis, keys=keys, batch_size=10_000, flush_interval=0.25)
        await ledger.start()
        recorded = 0
        started = time.monotonic()
        while time.monotonic() - started < 1.5:  # four records a millisecond, for 1.5 s
            for _ in range(4):
                ledger.record(make_record(recorded, prefix="steady"))
                recorded += 1
            await asyncio.sleep(0.001)
        await ledger.close()
        calls = (await redis.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0)
        assert len(await _stream_records(redis, keys)) == recorded
        await redis.aclose()
        return recorded, int(calls)

    recorded, script_calls = asyncio.run(scenario())
    assert recorded > 300
    # 1.5 s at a wake-up every 0.25 s, and close's own write (and the script's load)
    assert script_calls <= 10, f"{script_calls} script calls for {recorded} records"
