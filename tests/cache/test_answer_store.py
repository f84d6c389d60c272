"""The response cache's store contract, against the in-memory store and a real
redis-server: entries come back whole, expire with their TTL, and a store that cannot
answer says so (CacheUnavailable) instead of hanging or failing the request; the memory
store keeps to its byte budget, least recently used first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis

from gateway.cache.answer_store import (
    AnswerCacheStore,
    CacheUnavailable,
    MemoryAnswerCache,
    RedisAnswerCache,
)
from gateway.limits.redis_limit_store import redis_client
from tests.support.redis_server import RedisServer

Scenario = Callable[[AnswerCacheStore], Coroutine[Any, Any, Any]]


@pytest.fixture(params=["memory", "redis"])
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Scenario], Any]]:
    if request.param == "memory":
        yield lambda scenario: asyncio.run(scenario(MemoryAnswerCache(1 << 20)))
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(server.url) as client:
        client.flushdb()

    def on_redis(scenario: Scenario) -> Any:
        async def main() -> Any:
            store = RedisAnswerCache(
                redis_client(server.url, timeout_seconds=2.0), timeout_seconds=2.0
            )
            try:
                return await scenario(store)
            finally:
                await store.close()

        return asyncio.run(main())

    yield on_redis


def test_a_stored_entry_comes_back_byte_for_byte(run: Callable[[Scenario], Any]) -> None:
    data = bytes(range(256)) * 4

    async def scenario(store: AnswerCacheStore) -> None:
        assert await store.get("gw:rc:acme:{a}") is None
        assert await store.put("gw:rc:acme:{a}", data, ttl_seconds=60)
        assert await store.get("gw:rc:acme:{a}") == data
        assert await store.get("gw:rc:globex:{a}") is None

    run(scenario)


def test_an_entry_is_gone_after_its_ttl(run: Callable[[Scenario], Any]) -> None:
    async def scenario(store: AnswerCacheStore) -> None:
        await store.put("short", b"x", ttl_seconds=1)
        await store.put("long", b"y", ttl_seconds=60)
        await asyncio.sleep(1.2)
        assert await store.get("short") is None
        assert await store.get("long") == b"y"

    run(scenario)


def test_a_rewrite_replaces_the_entry(run: Callable[[Scenario], Any]) -> None:
    async def scenario(store: AnswerCacheStore) -> None:
        await store.put("k", b"old", ttl_seconds=60)
        await store.put("k", b"new", ttl_seconds=60)
        assert await store.get("k") == b"new"

    run(scenario)


def test_the_memory_store_drops_least_recently_used_entries_past_its_budget() -> None:
    async def scenario() -> None:
        store = MemoryAnswerCache(max_bytes=3000)
        for name in "abc":
            await store.put(name, name.encode() * 1000, ttl_seconds=60)
        await store.get("a")  # now the most recently used
        await store.put("d", b"d" * 1000, ttl_seconds=60)
        assert await store.get("b") is None
        assert [await store.get(n) is not None for n in "acd"] == [True, True, True]
        assert store.size_bytes == 3000
        assert not await store.put("huge", b"h" * 3001, ttl_seconds=60)
        assert store.size_bytes == 3000

    asyncio.run(scenario())


def test_a_memory_entry_expires_by_its_clock() -> None:
    now = [100.0]
    store = MemoryAnswerCache(1024, clock=lambda: now[0])

    async def scenario() -> None:
        await store.put("k", b"v", ttl_seconds=10)
        now[0] = 109.9
        assert await store.get("k") == b"v"
        now[0] = 110.0
        assert await store.get("k") is None
        assert store.size_bytes == 0

    asyncio.run(scenario())


def test_redis_down_is_unavailable_and_not_asked_again_until_the_retry_time() -> None:
    server = RedisServer()
    server.start()
    now = [0.0]

    async def scenario() -> None:
        store = RedisAnswerCache(
            redis_client(server.url, timeout_seconds=0.5),
            timeout_seconds=0.5,
            retry_after_seconds=5.0,
            clock=lambda: now[0],
        )
        try:
            assert await store.put("k", b"v", ttl_seconds=60)
            server.stop()
            with pytest.raises(CacheUnavailable):
                await store.get("k")
            server.start()
            now[0] = 4.9  # within the retry window: Redis is not asked
            with pytest.raises(CacheUnavailable, match="not asked"):
                await store.get("k")
            now[0] = 5.1
            assert await store.get("k") is None  # a fresh redis-server: empty
            assert await store.put("k", b"w", ttl_seconds=60)
            assert await store.get("k") == b"w"
        finally:
            await store.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_a_hung_redis_is_unavailable_within_the_timeout() -> None:
    server = RedisServer()
    server.start()

    async def scenario() -> float:
        store = RedisAnswerCache(redis_client(server.url, timeout_seconds=5.0), timeout_seconds=0.2)
        try:
            await store.put("k", b"v", ttl_seconds=60)
            assert server.process is not None
            server.process.send_signal(19)  # SIGSTOP: connected, never answers
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(CacheUnavailable):
                await store.get("k")
            return loop.time() - started
        finally:
            assert server.process is not None
            server.process.send_signal(18)  # SIGCONT
            await store.close()

    try:
        assert asyncio.run(scenario()) < 2.0
    finally:
        server.stop()
