from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis

from gateway.limits import GuardedLimitStore, LimitStore, MemoryLimitStore, RedisLimitStore
from tests.support.redis_server import RedisServer

Scenario = Callable[[LimitStore], Coroutine[Any, Any, Any]]
StoreRunner = Callable[[Scenario], Any]

# generous: these tests prove behaviour, not speed, and the machine is shared
TIMEOUT_SECONDS = 2.0


def redis_store_runner(url: str, *, guarded: bool = False) -> StoreRunner:
    def run(scenario: Scenario) -> Any:
        async def main() -> Any:
            store: LimitStore = await RedisLimitStore.open(
                url, timeout_seconds=TIMEOUT_SECONDS, cluster=False
            )
            if guarded:
                # fail_closed: any store failure would surface as an error in the test
                store = GuardedLimitStore(
                    store, mode="fail_closed", timeout_seconds=TIMEOUT_SECONDS
                )
            try:
                return await scenario(store)
            finally:
                await store.close()

        return asyncio.run(main())

    return run


def memory_store_runner() -> StoreRunner:
    def run(scenario: Scenario) -> Any:
        return asyncio.run(scenario(MemoryLimitStore()))

    return run


@pytest.fixture(params=["memory", "redis", "guarded-redis"])
def run_store(request: pytest.FixtureRequest) -> Iterator[StoreRunner]:
    """Runs an async scenario against a fresh store of each kind (an empty Redis db); the
    guarded one proves the failure guard passes every answer through unchanged."""
    if request.param == "memory":
        yield memory_store_runner()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(server.url) as client:
        client.flushdb()
    yield redis_store_runner(server.url, guarded=request.param == "guarded-redis")
