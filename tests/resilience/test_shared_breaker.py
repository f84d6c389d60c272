"""The shared breaker against a real redis-server: two breaker objects with their own
Redis clients stand for two gateway replicas."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.resilience.breaker import BreakerConfig
from gateway.resilience.shared_breaker import (
    SharedBreakerBoard,
    SharedCircuitBreaker,
    breaker_key,
)
from tests.resilience.fakes import FakeClock
from tests.support.redis_server import RedisServer

THREE_STRIKES = BreakerConfig(
    failure_threshold=3,
    window_seconds=10.0,
    error_rate=1.0,
    min_requests=1000,
    open_seconds=0.3,
    max_open_seconds=0.6,
    half_open_probes=1,
    half_open_successes=1,
)


def replica_breaker(
    client: Redis, name: str, config: BreakerConfig, **options: Any
) -> SharedCircuitBreaker:
    # a loaded test machine can take longer than the production 50 ms; tests that are
    # about the timeout set their own
    options.setdefault("timeout", 2.0)
    return SharedCircuitBreaker(client, name, config, **options)


def unique_name() -> str:
    return f"deployment-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def replicas(server: RedisServer, count: int = 2) -> AsyncIterator[list[Redis]]:
    # one client each, as separate gateway processes would have; one decodes replies
    clients = [Redis.from_url(server.url, decode_responses=bool(i % 2)) for i in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.aclose()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        # a hang would be a failure of the very thing under test
        await asyncio.wait_for(scenario(), timeout=20)

    asyncio.run(bounded())


def test_two_replicas_agree_the_breaker_is_open(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, THREE_STRIKES, refresh_interval=0)
            second = replica_breaker(two, name, THREE_STRIKES, refresh_interval=0)
            assert await second.allow()
            for _ in range(3):
                assert await first.allow()
                await first.record_failure()
            assert first.state == "open"
            assert not await second.allow()
            assert second.state == "open"
            assert not second.degraded

    run(scenario)


def test_failures_from_both_replicas_add_up_to_the_error_rate(
    redis_server: RedisServer,
) -> None:
    config = BreakerConfig(
        failure_threshold=1000,
        window_seconds=10.0,
        error_rate=0.5,
        min_requests=10,
        open_seconds=5.0,
    )

    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, config, refresh_interval=0)
            second = replica_breaker(two, name, config, refresh_interval=0)
            for _ in range(2):
                await first.record_failure()
                await first.record_success()
                await second.record_failure()
                await second.record_success()
            await first.record_success()
            assert await first.allow()  # 9 requests, 4 failed: below both limits
            await second.record_failure()  # 10 requests, 5 failed between the two
            assert not await first.allow()
            assert first.local_state == "closed"  # neither replica alone saw enough

    run(scenario)


def test_half_open_trial_slots_are_shared_between_replicas(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, THREE_STRIKES, refresh_interval=0)
            second = replica_breaker(two, name, THREE_STRIKES, refresh_interval=0)
            for _ in range(3):
                await first.record_failure()
            await asyncio.sleep(THREE_STRIKES.open_seconds + 0.05)
            assert await first.allow()
            assert first.state == "half_open"
            assert not await second.allow()
            await first.record_success()
            assert first.state == "closed"
            assert await second.allow()
            assert second.state == "closed"

    run(scenario)


def test_refused_trial_slot_is_remembered_until_the_next_refresh(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        name = unique_name()
        clock = FakeClock()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, THREE_STRIKES, refresh_interval=0)
            second = replica_breaker(two, name, THREE_STRIKES, refresh_interval=0.1, clock=clock)
            for _ in range(3):
                await first.record_failure()
            await asyncio.sleep(THREE_STRIKES.open_seconds + 0.05)
            assert await first.allow()  # the first replica holds the one trial slot
            assert not await second.allow()
            calls_before = await script_calls(one)
            assert not await second.allow()
            assert not second.would_allow()
            assert await script_calls(one) == calls_before
            await first.record_success()
            clock.advance(0.1)
            assert await second.allow()
            assert second.state == "closed"

    run(scenario)


def test_failed_trial_reopens_for_every_replica(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, THREE_STRIKES, refresh_interval=0)
            second = replica_breaker(two, name, THREE_STRIKES, refresh_interval=0)
            for _ in range(3):
                await first.record_failure()
            await asyncio.sleep(THREE_STRIKES.open_seconds + 0.05)
            assert await second.allow()
            await second.record_failure()
            assert not await first.allow()
            assert first.state == "open"

    run(scenario)


async def script_calls(client: Redis) -> int:
    """How many times Redis ran a cached script, as Redis itself counts it."""
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_hot_path_reads_the_cache_until_the_refresh_interval_passes(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        name = unique_name()
        clock = FakeClock()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, THREE_STRIKES, refresh_interval=0)
            second = replica_breaker(two, name, THREE_STRIKES, refresh_interval=0.1, clock=clock)
            assert await second.allow()
            for _ in range(3):
                await first.record_failure()
            # no time has passed for the second replica: it answers from its cache
            calls_before = await script_calls(one)
            assert await second.allow()
            assert await script_calls(one) == calls_before
            clock.advance(0.1)
            assert not await second.allow()

    run(scenario)


def test_a_run_of_failures_that_trips_is_sent_at_once(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        name = unique_name()
        clock = FakeClock()
        async with replicas(redis_server) as (one, two):
            batching = replica_breaker(one, name, THREE_STRIKES, refresh_interval=60.0, clock=clock)
            watcher = replica_breaker(two, name, THREE_STRIKES, refresh_interval=0)
            assert await batching.allow()
            await batching.record_failure()
            await batching.record_failure()
            assert await watcher.allow()  # two failures still batched locally
            await batching.record_failure()
            assert not await watcher.allow()

    run(scenario)


def test_breaker_key_has_a_hash_tag_and_a_ttl(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server, count=1) as (client,):
            breaker = replica_breaker(
                client, name, THREE_STRIKES, key_prefix="gwtest", refresh_interval=0
            )
            for _ in range(3):
                await breaker.record_failure()
            key = breaker_key("gwtest", name)
            assert key == f"gwtest:breaker:{{{name}}}"
            ttl_ms = await client.pttl(key)
            assert 0 < ttl_ms <= 2 * (10_000 + 600 + 300)

    run(scenario)


def test_killed_redis_falls_back_to_local_decisions_and_recovers(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> None:
        name = unique_name()
        clock = FakeClock()
        async with replicas(fresh_redis, count=1) as (client,):
            breaker = replica_breaker(
                client,
                name,
                THREE_STRIKES,
                refresh_interval=0,
                redis_retry_interval=1.0,
                clock=clock,
            )
            assert await breaker.allow()
            fresh_redis.stop(kill=True)
            assert await breaker.allow()
            assert breaker.degraded
            for _ in range(3):
                await breaker.record_failure()
            assert not await breaker.allow()
            assert breaker.state == "open"
            await breaker.release()  # nothing held, nothing raised

            fresh_redis.start()
            clock.advance(1.0)
            # Redis never saw the failures made while it was down: shared state is closed
            assert await breaker.allow()
            assert not breaker.degraded
            assert breaker.state == "closed"

    run(scenario)


def test_stalled_redis_costs_at_most_the_timeout_then_decides_locally(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> None:
        assert fresh_redis.process is not None
        pid = fresh_redis.process.pid
        async with replicas(fresh_redis, count=1) as (client,):
            breaker = replica_breaker(
                client, unique_name(), THREE_STRIKES, refresh_interval=0, timeout=0.05
            )
            assert await breaker.allow()
            os.kill(pid, signal.SIGSTOP)
            try:
                assert await breaker.allow()
                assert breaker.degraded
                await breaker.record_failure()
            finally:
                os.kill(pid, signal.SIGCONT)

    run(scenario)


def test_board_shares_breakers_by_name_and_its_refresher_brings_ejections_over(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server) as (one, two):
            board_one = SharedBreakerBoard(one, THREE_STRIKES, refresh_interval=0, timeout=2.0)
            board_two = SharedBreakerBoard(two, THREE_STRIKES, refresh_interval=0.05, timeout=2.0)
            assert board_one.get(name) is board_one.get(name)
            watcher = board_two.get(name)
            await watcher.refresh()
            assert watcher.blocked() is None
            for _ in range(3):
                await board_one.get(name).record_failure()
            await board_two.start()
            try:
                # nothing asks the second board's breaker: its refresher alone must see it
                for _ in range(200):
                    if watcher.blocked() is not None:
                        break
                    await asyncio.sleep(0.02)
                blocked = watcher.blocked()
                assert blocked is not None and blocked.reason == "circuit_open"
                assert board_two.states()[name] == "open"
            finally:
                await board_two.stop()

    run(scenario)


def test_ejections_grow_across_replicas_and_the_ramp_is_shared(redis_server: RedisServer) -> None:
    ramp = BreakerConfig(
        failure_threshold=1,
        window_seconds=10.0,
        error_rate=1.0,
        min_requests=1000,
        open_seconds=0.2,
        max_open_seconds=10.0,
        half_open_probes=1,
        half_open_successes=2,
    )

    async def scenario() -> None:
        name = unique_name()
        async with replicas(redis_server) as (one, two):
            first = replica_breaker(one, name, ramp, refresh_interval=0)
            second = replica_breaker(two, name, ramp, refresh_interval=0)
            await first.record_failure()
            assert first.state == "open"
            await asyncio.sleep(0.25)
            assert await second.allow()  # the one trial slot
            await second.record_failure()  # a failed trial: the 2nd ejection, 0.4 s
            await first.refresh()
            assert first.state == "open"
            blocked = first.blocked()
            assert blocked is not None and blocked.until - blocked.since > 0.3
            await asyncio.sleep(0.45)
            assert await first.allow()
            assert not await second.allow()  # 1 slot, taken
            await first.record_success()  # 1 success of 2: two slots now
            assert await second.allow()
            assert await first.allow()
            await second.record_success()
            await first.refresh()
            assert first.state == "closed"

    run(scenario)


def test_a_redis_outage_is_logged_once_for_the_whole_board(
    fresh_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with replicas(fresh_redis, count=1) as (client,):
            board = SharedBreakerBoard(client, THREE_STRIKES, refresh_interval=0, timeout=0.5)
            breakers = [board.get(unique_name()) for _ in range(3)]
            for breaker in breakers:
                assert await breaker.allow()
            fresh_redis.stop(kill=True)
            for breaker in breakers:
                assert await breaker.allow()
                await breaker.record_failure()
            assert board.degraded

    with caplog.at_level(logging.WARNING, logger="gateway.resilience.shared_breaker"):
        run(scenario)
    warnings = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
    assert len(warnings) == 1
