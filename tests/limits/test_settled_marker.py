"""A settled request's marker lives ten minutes (and ten call deadlines at least), not a
day: long past any retry of the settlement, short enough that Redis does not hold a key
per request for a day."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import redis

from gateway.limits import RedisLimitStore, settlement_for
from tests.limits.builders import admission, tokens_bucket
from tests.support.redis_server import RedisServer


def _settled_markers(url: str) -> dict[bytes, int]:
    with redis.Redis.from_url(url) as client:
        return {key: int(client.ttl(key)) for key in client.scan_iter(match="*:settled:*")}


def _settle_one(url: str, timeout_seconds: float) -> None:
    async def main() -> None:
        store = await RedisLimitStore.open(url, timeout_seconds=timeout_seconds, cluster=False)
        try:
            reserve = admission(buckets=(tokens_bucket(capacity=1000, amount=800),))
            admitted = await store.admit(reserve)
            settled = settlement_for(reserve, admitted, actual_tokens=1, actual_cost_usd=Decimal(0))
            assert await store.settle(settled)
            assert not await store.settle(settled)  # the marker holds it to once
        finally:
            await store.close()

    asyncio.run(main())


def test_the_settled_marker_lapses_after_ten_minutes(redis_server: RedisServer) -> None:
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushdb()
    _settle_one(redis_server.url, timeout_seconds=2.0)
    markers = _settled_markers(redis_server.url)
    assert len(markers) == 1
    assert 0 < next(iter(markers.values())) <= 600


def test_a_long_store_timeout_keeps_the_marker_ten_deadlines(redis_server: RedisServer) -> None:
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushdb()
    _settle_one(redis_server.url, timeout_seconds=120.0)
    (ttl,) = _settled_markers(redis_server.url).values()
    assert 600 < ttl <= 1200
