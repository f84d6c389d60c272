"""What the Redis store leaves in Redis: bounded lease sets and keys that all expire.

admit.lua skips work that would change nothing (reclaiming expired leases from a set
that is not full, setting a calendar budget's end again); these tests prove the state
stays bounded and expiring all the same."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import redis

from gateway.limits import LimitStore, settlement_for
from tests.limits.builders import admission, day_budget, lease, requests_bucket
from tests.limits.conftest import redis_store_runner
from tests.support.redis_server import RedisServer


def test_a_lease_set_never_holds_more_members_than_its_limit(redis_db: RedisServer) -> None:
    spec = lease("leaky", limit=3, ttl_seconds=0.1)

    async def scenario(store: LimitStore) -> list[bool]:
        allowed = []
        for _ in range(4):
            # holders that crash: admitted, never released, their leases lapse
            allowed += [(await store.admit(admission(leases=(spec,)))).allowed for _ in range(3)]
            await asyncio.sleep(0.15)
        return allowed

    assert redis_store_runner(redis_db.url)(scenario) == [True] * 12
    assert redis.Redis.from_url(redis_db.url).zcard(spec.key) <= 3


def test_lease_sets_expire_after_their_latest_lease(redis_db: RedisServer) -> None:
    spec = lease("ttl", limit=10, ttl_seconds=2.0)

    async def scenario(store: LimitStore) -> None:
        await store.admit(admission(leases=(spec,)))
        await asyncio.sleep(0.5)
        await store.admit(admission(leases=(spec,)))

    redis_store_runner(redis_db.url)(scenario)
    ttl_ms = redis.Redis.from_url(redis_db.url).pttl(spec.key)
    # extended by the second lease (taken 0.5 s later), never past its own expiry
    assert 1700 < ttl_ms <= 2000


def test_a_calendar_budget_key_ends_with_its_period_through_refunds(
    redis_db: RedisServer,
) -> None:
    period_end = int(time.time()) + 86_400
    budget = day_budget("10", "0.5", period_end, name="refunded")
    client = redis.Redis.from_url(redis_db.url)

    def expiry() -> int:
        # EXPIRETIME is Redis 7; PTTL works on 6.2 too
        return round(time.time() + client.pttl(budget.key) / 1000)

    async def scenario(store: LimitStore) -> list[int]:
        expiries = []
        for _ in range(3):
            request = admission(budgets=(budget,), buckets=(requests_bucket("r", 100),))
            admitted = await store.admit(request)
            expiries.append(expiry())
            # nothing served: the whole reservation is refunded, the spend is back at 0
            await store.settle(
                settlement_for(request, admitted, actual_tokens=0, actual_cost_usd=Decimal(0))
            )
            expiries.append(expiry())
        return expiries

    expiries = redis_store_runner(redis_db.url)(scenario)
    # the grace hour after the period: admit.lua's PERIOD_GRACE_S
    assert all(abs(at - (period_end + 3600)) <= 2 for at in expiries), expiries
    assert client.hget(budget.key, "spent") == b"0"
