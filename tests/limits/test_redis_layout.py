"""What the Redis store leaves in Redis: bounded lease sets and keys that all expire.

admit.lua skips work that would change nothing (reclaiming expired leases from a set
that is not full, setting a calendar budget's end again); these tests prove the state
stays bounded and expiring all the same."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import pytest
import redis

from gateway.limits import LimitStore, settlement_for
from tests.limits.builders import admission, day_budget, lease, requests_bucket, tokens_bucket
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


def test_a_refund_keeps_the_bucket_s_ttl_and_a_charge_extends_it(redis_db: RedisServer) -> None:
    # adjust.lua sets no new TTL on a bucket that has no fewer tokens than it read: the
    # TTL its last write set still covers its refill (and the margin)
    bucket = tokens_bucket("refund", capacity=1000, per_second=1.0, amount=400)
    client = redis.Redis.from_url(redis_db.url)

    def ttl_and_needed() -> tuple[float, float]:
        tokens = float(client.hget(bucket.key, "t") or 0)
        # seconds to refill, plus the scripts' 10 s margin
        return client.pttl(bucket.key) / 1000, (1000 - tokens) / 1.0 + 10

    async def scenario(store: LimitStore) -> list[tuple[float, float]]:
        seen = []
        request = admission(buckets=(bucket,))
        admitted = await store.admit(request)
        seen.append(ttl_and_needed())
        # 300 of the 400 tokens reserved are refunded
        await store.settle(
            settlement_for(request, admitted, actual_tokens=100, actual_cost_usd=Decimal(0))
        )
        seen.append(ttl_and_needed())
        # then 500 more than reserved are charged
        request = admission(buckets=(bucket,))
        admitted = await store.admit(request)
        await store.settle(
            settlement_for(request, admitted, actual_tokens=900, actual_cost_usd=Decimal(0))
        )
        seen.append(ttl_and_needed())
        return seen

    (taken, refunded, charged) = redis_store_runner(redis_db.url)(scenario)
    assert 409 < taken[0] <= 410 and taken[1] == pytest.approx(410, abs=0.5)
    # the refund left the admission's TTL, past the ~110 s the bucket now needs
    assert refunded[1] == pytest.approx(110, abs=0.5)
    assert refunded[0] == pytest.approx(taken[0], abs=0.5)
    # the charge (400 more taken, 500 more charged: down to ~0 tokens) set a TTL for the
    # longer refill
    assert charged[1] == pytest.approx(1010, abs=1)
    assert charged[0] >= charged[1] - 0.5


def test_the_answer_s_tokens_are_what_was_stored(redis_db: RedisServer) -> None:
    # a refill rate with no short decimal makes the tokens fractional
    bucket = tokens_bucket("exact", capacity=1000, per_second=1000 / 7, amount=333)
    client = redis.Redis.from_url(redis_db.url)

    async def scenario(store: LimitStore) -> list[tuple[float, bytes]]:
        seen = []
        for _ in range(3):
            admitted = await store.admit(admission(buckets=(bucket,)))
            assert admitted.allowed and admitted.tokens is not None
            stored = client.hget(bucket.key, "t")
            assert isinstance(stored, bytes)
            seen.append((admitted.tokens.remaining, stored))
        return seen

    seen = redis_store_runner(redis_db.url)(scenario)
    assert all(remaining == float(stored) for remaining, stored in seen), seen
    # a bucket refilled between takes holds a fraction, written as '%.17g' writes it
    assert any(b"." in stored for _, stored in seen), seen
    assert all(float(stored) == float(f"{float(stored):.17g}") for _, stored in seen)


def test_a_settlement_that_changes_no_spend_leaves_a_budget_as_it_was(
    redis_db: RedisServer,
) -> None:
    period_end = int(time.time()) + 86_400
    budget = day_budget("10", "0.5", period_end, name="unchanged")
    gone = day_budget("10", "0.5", period_end, name="gone")
    client = redis.Redis.from_url(redis_db.url)

    async def scenario(store: LimitStore) -> None:
        request = admission(budgets=(budget, gone))
        admitted = await store.admit(request)
        # the second budget's period passed (its key expired) before the settlement
        client.delete(gone.key)
        await store.settle(
            settlement_for(request, admitted, actual_tokens=0, actual_cost_usd=Decimal("0.5"))
        )
        request = admission(budgets=(budget, gone))
        admitted = await store.admit(request)
        client.delete(gone.key)
        await store.settle(
            settlement_for(request, admitted, actual_tokens=0, actual_cost_usd=Decimal("0.2"))
        )

    redis_store_runner(redis_db.url)(scenario)
    # 0.5 reserved and spent, then 0.5 reserved and 0.2 spent
    assert client.hget(budget.key, "spent") == b"700000"
    # a correction of a reservation that is gone makes no key (none without a TTL)
    assert not client.exists(gone.key)
    assert client.ttl(budget.key) > 86_400
