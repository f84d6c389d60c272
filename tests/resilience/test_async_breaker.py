from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from gateway.resilience.async_breaker import AsyncBreakerBoard, AsyncLocalBreakerBoard
from gateway.resilience.breaker import BreakerBoard, BreakerConfig
from gateway.resilience.shared_breaker import SharedBreakerBoard
from tests.resilience.fakes import FakeClock
from tests.support.redis_server import RedisServer

TWO_STRIKES = BreakerConfig(failure_threshold=2, open_seconds=5.0)


async def trip_and_check(board: AsyncBreakerBoard, name: str) -> None:
    breaker = board.get(name)
    assert await breaker.allow()
    assert breaker.blocked() is None
    await breaker.record("backpressure")
    await breaker.record("neutral")
    assert breaker.state == "closed"
    await breaker.record("failure")
    await breaker.record("failure")
    assert not await breaker.allow()
    assert breaker.state == "open"
    blocked = breaker.blocked()
    assert blocked is not None and blocked.reason == "circuit_open"
    assert board.states()[name] == "open"
    assert breaker.cool_down(1.0)


def test_local_board_behind_the_async_interface_trips_like_the_local_one() -> None:
    board = AsyncLocalBreakerBoard(BreakerBoard(TWO_STRIKES, clock=FakeClock()))
    asyncio.run(trip_and_check(board, "openai-main"))


def test_shared_board_satisfies_the_same_async_interface(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        client = Redis.from_url(redis_server.url)
        try:
            board = SharedBreakerBoard(client, TWO_STRIKES, refresh_interval=0, timeout=2.0)
            await trip_and_check(board, "async-interface-deployment")
        finally:
            await client.aclose()

    asyncio.run(scenario())
