"""A record whose id the gateway minted is marked written by one bit in its process's
bitmap, not a key of its own: written once all the same (retries, replays, duplicates
in a batch, across bitmaps), in a handful of keys that expire."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.metering.aggregates import SEEN_BITS_PER_KEY, LedgerKeys, parse_aggregate
from gateway.metering.ledger import WRITE_SCRIPT, Ledger, LedgerRecord
from gateway.pipeline.request_ids import RequestIds
from tests.metering.support import ReplyLosingProxy, client, make_record
from tests.support.redis_server import RedisServer

PROCESS = "0123456789abcdef"


def _with_ids(records: list[LedgerRecord], counters: range) -> list[LedgerRecord]:
    """The records as one process minted them (pipeline/request_ids' spelling)."""
    return [
        msgspec.structs.replace(record, record_id=f"req_{PROCESS}{counter:08x}")
        for record, counter in zip(records, counters, strict=True)
    ]


async def _seen_keys(redis: Redis, keys: LedgerKeys) -> list[bytes]:
    return [key async for key in redis.scan_iter(match=f"{keys.base}:seen:*", count=1000)]


async def _requests_counted(redis: Redis, keys: LedgerKeys, day: str) -> int:
    raw = await redis.hgetall(keys.aggregate("day", day, "tenant"))
    counters = parse_aggregate({k.decode(): v.decode() for k, v in raw.items()})
    return sum(values["requests"] for values in counters.values())


def test_the_ids_the_gateway_mints_are_marked_by_a_bit() -> None:
    keys = LedgerKeys("t-mint")
    ids = RequestIds()
    first = msgspec.structs.replace(make_record(1), record_id=ids.mint())
    second = msgspec.structs.replace(make_record(2), record_id=ids.mint())
    (key_one, bit_one), (key_two, bit_two) = map(keys.written_marker, (first, second))
    assert key_one == key_two and bit_one >= 0 and bit_two == bit_one + 1
    # a record from before record ids, and a client's request id, keep their own key
    assert keys.written_marker(make_record(3)) == (keys.seen(make_record(3).request_id), -1)


def test_another_spelling_of_a_counter_is_another_record(redis_server: RedisServer) -> None:
    keys = LedgerKeys("t-spelling")
    base = make_record(5, prefix="spelling")
    canonical = msgspec.structs.replace(base, record_id=f"req_{PROCESS}0000000a")
    padded = msgspec.structs.replace(base, record_id=f"req_{PROCESS}00000000a")
    assert keys.written_marker(padded)[1] == -1

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys)
        for record in (canonical, padded, canonical, padded):
            ledger.record(record)
        await ledger.flush()
        assert (ledger.records_written, ledger.duplicates_skipped) == (2, 2)
        await redis.aclose()

    asyncio.run(scenario())


def test_a_replay_of_thousands_writes_nothing_twice_and_leaves_two_expiring_keys(
    redis_server: RedisServer,
) -> None:
    keys = LedgerKeys("t-bits")
    # counters across a bitmap boundary: two bitmap keys
    start = SEEN_BITS_PER_KEY - 1500
    records = _with_ids(
        [make_record(n, prefix="bits") for n in range(3000)], range(start, start + 3000)
    )

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys, batch_size=128)
        for record in records:
            ledger.record(record)
        await ledger.flush()
        assert ledger.records_written == 3000
        seen = await _seen_keys(redis, keys)
        assert len(seen) == 2
        for key in seen:
            ttl = await redis.ttl(key)
            assert 0 < ttl <= ledger.retention.written_marker_seconds
        # a successor replaying the same records (a journal, a spill file): none again,
        # in batches that mix the two bitmaps and repeat records within a batch
        successor = Ledger(redis, keys=keys, batch_size=400)
        for record in records[1000:2000] + records[1400:1600] + records[:10]:
            successor.record(record)
        await successor.flush()
        assert (successor.records_written, successor.duplicates_skipped) == (0, 1210)
        assert await redis.xlen(keys.stream) == 3000
        assert await _requests_counted(redis, keys, records[0].day) == sum(
            1 for r in records if r.day == records[0].day
        )
        await redis.aclose()

    asyncio.run(scenario())


def test_a_flush_retried_after_a_lost_reply_writes_each_minted_record_once(
    redis_server: RedisServer,
) -> None:
    keys = LedgerKeys("t-bits-retry")
    records = _with_ids([make_record(n, prefix="bretry") for n in range(200)], range(1, 201))

    async def scenario() -> None:
        direct = client(redis_server.port)
        proxy = ReplyLosingProxy(redis_server.port)
        await proxy.start()
        through_proxy = client(proxy.port)
        ledger = Ledger(through_proxy, keys=keys, batch_size=200)
        await through_proxy.script_load(WRITE_SCRIPT)
        for record in records:
            ledger.record(record)
        proxy.lose_replies = True
        with pytest.raises(RedisConnectionError):
            await ledger.flush()
        deadline = asyncio.get_running_loop().time() + 10
        while int(await direct.xlen(keys.stream)) < 200:  # Redis executed the write
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        proxy.lose_replies = False
        await ledger.flush()
        assert (ledger.records_written, ledger.duplicates_skipped) == (0, 200)
        assert await direct.xlen(keys.stream) == 200
        assert await _requests_counted(direct, keys, records[0].day) == 200
        await through_proxy.aclose()
        await direct.aclose()
        await proxy.stop()

    asyncio.run(scenario())


def test_a_record_an_older_gateway_marked_by_its_own_key_is_not_written_again(
    redis_server: RedisServer,
) -> None:
    """A journal left by a gateway from before the bitmaps, replayed after the upgrade:
    the records it had written carry their own key, as its script set them."""
    keys = LedgerKeys("t-upgrade")
    records = _with_ids([make_record(n, prefix="upgrade") for n in range(4)], range(1, 5))

    async def scenario() -> None:
        redis = client(redis_server.port)
        for record in records[:2]:  # what the older gateway wrote
            await redis.set(keys.seen(record.once_key), "1", ex=86_400)
        ledger = Ledger(redis, keys=keys)
        for record in records:
            ledger.record(record)
        await ledger.flush()
        assert (ledger.records_written, ledger.duplicates_skipped) == (2, 2)
        assert [r.record_id for r in await _stream(redis, keys)] == [
            r.record_id for r in records[2:]
        ]
        await redis.aclose()

    asyncio.run(scenario())


async def _stream(redis: Redis, keys: LedgerKeys) -> list[LedgerRecord]:
    return [LedgerRecord.from_json(f[b"record"]) for _, f in await redis.xrange(keys.stream)]
