"""Redis trouble under load: killed, hung, restarted. Nothing waits past the timeout, the
configured failure mode answers, and limits come back by themselves."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import pytest

from gateway.errors import StoreUnavailable
from gateway.limits import Admission, GuardedLimitStore, RedisLimitStore, settlement_for
from tests.limits.builders import admission, lease, requests_bucket, tokens_bucket
from tests.support.redis_server import RedisServer
from tests.support.stalls import StallWatch

# the shipped default: a healthy Redis on a busy CI machine must not look like a timeout
TIMEOUT = 0.25
# scheduling noise on a shared 2-core machine beyond what StallWatch sees (a loop turn,
# a reconnect); the bound proves "no hang", not speed
SLACK = 0.4
PROBE_INTERVAL = 0.1


async def timed_admit(store: GuardedLimitStore) -> tuple[Admission | StoreUnavailable, float]:
    started = time.monotonic()
    try:
        answer: Admission | StoreUnavailable = await store.admit(
            admission(buckets=(requests_bucket(capacity=1_000_000),))
        )
    except StoreUnavailable as error:
        answer = error
    return answer, time.monotonic() - started


@dataclass
class Load:
    answers: list[tuple[object, float]]
    # the longest this process sat unscheduled meanwhile: every call in flight then
    # looks that much slower, whatever the store did
    stalled: float

    def assert_nothing_waited_past_the_timeout(self) -> None:
        slowest = max(seconds for _, seconds in self.answers)
        assert slowest < TIMEOUT + SLACK + self.stalled, (slowest, self.stalled)


async def load(store: GuardedLimitStore, seconds: float) -> Load:
    """Ten concurrent clients admitting requests back to back for `seconds`."""
    answers: list[tuple[object, float]] = []
    deadline = time.monotonic() + seconds

    async def client() -> None:
        while time.monotonic() < deadline:
            answers.append(await timed_admit(store))
            await asyncio.sleep(0.005)

    with StallWatch() as stalls:
        await asyncio.gather(*(client() for _ in range(10)))
    return Load(answers, stalls.longest)


async def guarded(
    server: RedisServer, mode: Literal["fail_open", "fail_closed"]
) -> GuardedLimitStore:
    inner = await RedisLimitStore.open(server.url, timeout_seconds=TIMEOUT, cluster=False)
    return GuardedLimitStore(
        inner, mode=mode, timeout_seconds=TIMEOUT, probe_interval_seconds=PROBE_INTERVAL
    )


async def until_recovered(store: GuardedLimitStore) -> Admission:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer, _ = await timed_admit(store)
        if isinstance(answer, Admission) and not answer.degraded:
            return answer
        await asyncio.sleep(0.05)
    raise AssertionError("the store did not recover")


def test_fail_open_keeps_serving_while_redis_is_killed_and_recovers(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> None:
        store = await guarded(fresh_redis, "fail_open")
        try:
            before = (await load(store, 0.3)).answers
            assert all(isinstance(a, Admission) and not a.degraded for a, _ in before)
            fresh_redis.stop(kill=True)
            loaded = await load(store, 0.5)
            during = loaded.answers
            assert all(isinstance(a, Admission) and a.allowed for a, _ in during)
            assert any(isinstance(a, Admission) and a.degraded for a, _ in during)
            assert store.state == "degraded"
            assert store.admitted_unchecked > 0 and store.failures > 0
            loaded.assert_nothing_waited_past_the_timeout()
            fresh_redis.start()  # same port, empty: the scripts must load again
            recovered = await until_recovered(store)
            assert recovered.allowed and store.state == "ok"
        finally:
            await store.close()

    asyncio.run(scenario())


def test_fail_closed_refuses_quickly_while_redis_is_killed_and_recovers(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> None:
        store = await guarded(fresh_redis, "fail_closed")
        try:
            fresh_redis.stop(kill=True)
            loaded = await load(store, 0.5)
            during = loaded.answers
            refusals = [a for a, _ in during if isinstance(a, StoreUnavailable)]
            assert len(refusals) == len(during) > 0
            assert refusals[0].status == 503
            assert "fail_closed" in refusals[0].message
            assert "redis://" not in refusals[0].message
            loaded.assert_nothing_waited_past_the_timeout()
            assert store.refused_unavailable == len(during)
            fresh_redis.start()
            await until_recovered(store)
            assert store.state == "ok"
        finally:
            await store.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
def test_hung_redis_costs_at_most_the_timeout(
    fresh_redis: RedisServer, mode: Literal["fail_open", "fail_closed"]
) -> None:
    """A Redis that accepts connections but never answers (SIGSTOP) is the case a timeout
    exists for."""

    async def scenario() -> None:
        store = await guarded(fresh_redis, mode)
        assert fresh_redis.process is not None
        pid = fresh_redis.process.pid
        try:
            await load(store, 0.1)
            os.kill(pid, signal.SIGSTOP)
            loaded = await load(store, 0.5)
            during = loaded.answers
            loaded.assert_nothing_waited_past_the_timeout()
            if mode == "fail_open":
                assert all(isinstance(a, Admission) and a.allowed for a, _ in during)
            else:
                assert all(isinstance(a, StoreUnavailable) for a, _ in during)
            os.kill(pid, signal.SIGCONT)
            await until_recovered(store)
        finally:
            os.kill(pid, signal.SIGCONT)
            await store.close()

    asyncio.run(scenario())


def test_settle_and_release_never_raise_while_redis_is_down(fresh_redis: RedisServer) -> None:
    async def scenario() -> None:
        store = await guarded(fresh_redis, "fail_closed")
        try:
            request = admission(buckets=(tokens_bucket(),), leases=(lease(),))
            held = await store.admit(request)
            assert held.allowed and held.leases
            fresh_redis.stop(kill=True)
            await store.release(held.leases)
            settled = settlement_for(request, held, actual_tokens=1, actual_cost_usd=Decimal(0))
            assert await store.settle(settled) is False
            assert store.failures >= 1
            assert not await store.ping()
            assert store.state == "degraded"
        finally:
            await store.close()

    asyncio.run(scenario())
