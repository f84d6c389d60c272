"""Admissions and settlements of one scope made in the same loop turn share one script run
on Redis, and answer exactly as if each had run alone, in order: the in-memory store (one
request at a time by construction) is the reference."""

from __future__ import annotations

import asyncio
import time
import uuid
from decimal import Decimal
from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.limits import (
    Admission,
    AdmissionRequest,
    BucketTake,
    BudgetReserve,
    LeaseSpec,
    LimitStore,
    MemoryLimitStore,
    RedisLimitStore,
    Settlement,
    settlement_for,
)
from gateway.limits.redis_limit_store import redis_client
from tests.limits.builders import admission, lease, requests_bucket
from tests.support.redis_server import RedisServer

TIMEOUT = 2.0
# refills too slowly to matter while a test runs: Redis and the memory store keep
# different clocks
SLOW = 1e-6


def _scope(capacity: int, tokens: int, slots: int, budget_usd: str) -> dict[str, Any]:
    tag = f"gw:{{t:{uuid.uuid4().hex[:8]}}}"
    return {
        "requests": (f"{tag}:rl:key:req", capacity),
        "tokens": (f"{tag}:rl:key:tok", tokens),
        "lease": LeaseSpec(f"{tag}:lease:key", slots, 30.0, "key"),
        "budget": (f"{tag}:budget:tenant:day", Decimal(budget_usd)),
    }


def _request(scope: dict[str, Any], request_id: str, tokens: int, usd: str) -> AdmissionRequest:
    requests_key, capacity = scope["requests"]
    tokens_key, token_capacity = scope["tokens"]
    budget_key, limit = scope["budget"]
    return AdmissionRequest(
        request_id,
        (
            BucketTake(requests_key, capacity, SLOW, 1, "key", "requests"),
            BucketTake(tokens_key, token_capacity, SLOW, tokens, "key", "tokens"),
        ),
        (scope["lease"],),
        (
            BudgetReserve(
                budget_key, limit, Decimal(usd), "tenant", "day", period_end=int(time.time()) + 3600
            ),
        ),
    )


def _summary(answer: Admission) -> tuple[Any, ...]:
    tokens = answer.tokens.remaining if answer.tokens else None
    requests = answer.requests.remaining if answer.requests else None
    used = tuple(b.used_micros for b in answer.budgets)
    return (
        answer.allowed,
        answer.refused_kind,
        answer.never_fits,
        None if requests is None else round(requests, 3),
        None if tokens is None else round(tokens, 3),
        used,
    )


async def _burst(store: LimitStore, requests: list[AdmissionRequest], together: bool) -> list[Any]:
    if together:
        return list(await asyncio.gather(*(store.admit(r) for r in requests)))
    return [await store.admit(r) for r in requests]


burst_requests = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=5),  # which id (a repeated id holds one lease)
        st.integers(min_value=1, max_value=60),  # tokens
        st.sampled_from(["0", "0.1", "0.25", "0.5"]),  # worst-case USD
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    capacity=st.integers(min_value=1, max_value=25),
    tokens=st.integers(min_value=20, max_value=400),
    slots=st.integers(min_value=1, max_value=12),
    budget=st.sampled_from(["0.3", "1", "2.5"]),
    burst=burst_requests,
    settled=st.lists(st.integers(min_value=0, max_value=40), min_size=0, max_size=30),
)
def test_a_burst_answers_as_if_its_requests_came_one_by_one(
    redis_server: RedisServer,
    capacity: int,
    tokens: int,
    slots: int,
    budget: str,
    burst: list[tuple[int, int, str]],
    settled: list[int],
) -> None:
    scope = _scope(capacity, tokens, slots, budget)
    ids = [uuid.uuid4().hex for _ in range(6)]
    requests = [_request(scope, ids[i], amount, usd) for i, amount, usd in burst]

    async def run(store: LimitStore, together: bool) -> tuple[list[Any], list[bool], Any]:
        try:
            answers = await _burst(store, requests, together)
            # the admitted requests settle, in one batch, with what they really used; once
            # per id, as the gateway's own ids are unique (a retry repeats the settlement
            # whole: `again` below)
            firsts = {r.request_id: n for n, r in reversed(list(enumerate(requests)))}
            settlements = [
                settlement_for(
                    request,
                    answer,
                    actual_tokens=settled[n % len(settled)] if settled else 0,
                    actual_cost_usd=Decimal("0.05"),
                    release_leases=True,
                )
                for n, (request, answer) in enumerate(zip(requests, answers, strict=True))
                if answer.allowed and firsts[request.request_id] == n
            ]
            applied = await store.settle_many(settlements)
            again = await store.settle_many(settlements)
            assert not any(again)  # a settlement applies once, merged or not
            # what the keys hold afterwards, seen by one more request
            probe = await store.admit(_request(scope, uuid.uuid4().hex, 1, "0"))
            return [_summary(a) for a in answers], applied, _summary(probe)
        finally:
            await store.close()

    async def on_redis() -> tuple[list[Any], list[bool], Any]:
        store = await RedisLimitStore.open(redis_server.url, timeout_seconds=TIMEOUT, cluster=False)
        return await run(store, together=True)

    expected = asyncio.run(run(MemoryLimitStore(), together=False))
    assert asyncio.run(on_redis()) == expected


def _evalsha_calls(server: RedisServer) -> int:
    stats = redis.Redis.from_url(server.url).info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_one_scope_s_burst_is_one_script_run_and_its_settlements_another(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> tuple[int, int, list[bool]]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            one = (requests_bucket(name="one", capacity=1000), lease(name="one", limit=100))
            other = (requests_bucket(name="other", capacity=1000), lease(name="other", limit=100))
            before = _evalsha_calls(fresh_redis)
            requests = [
                admission(buckets=(scope[0],), leases=(scope[1],))
                for scope in (one if n % 2 else other for n in range(100))
            ]
            answers = await asyncio.gather(*(store.admit(r) for r in requests))
            admitted = _evalsha_calls(fresh_redis) - before
            settlements = [
                settlement_for(
                    r, a, actual_tokens=0, actual_cost_usd=Decimal(0), release_leases=True
                )
                for r, a in zip(requests, answers, strict=True)
            ]
            before = _evalsha_calls(fresh_redis)
            applied = await store.settle_many(settlements)
            return admitted, _evalsha_calls(fresh_redis) - before, applied
        finally:
            await store.close()

    admitted, settling, applied = asyncio.run(scenario())
    assert admitted == 2  # one run per scope, not one per request
    assert settling == 2
    assert applied == [True] * 100


def test_a_burst_at_a_full_lease_set_reclaims_the_expired_leases(
    fresh_redis: RedisServer,
) -> None:
    slots = LeaseSpec(f"gw:{{t:{uuid.uuid4().hex[:8]}}}:lease:key", 3, 0.05, "key")

    async def scenario() -> list[bool]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            held = await asyncio.gather(
                *(store.admit(admission(leases=(slots,))) for _ in range(3))
            )
            assert all(a.allowed for a in held)
            await asyncio.sleep(0.1)  # every one of them has lapsed, nobody released them
            burst = await asyncio.gather(
                *(store.admit(admission(leases=(slots,))) for _ in range(5))
            )
            return [a.allowed for a in burst]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [True] * 3 + [False] * 2


def test_a_merged_run_that_fails_fails_only_its_own_callers(fresh_redis: RedisServer) -> None:
    broken = requests_bucket(name="broken", capacity=10)
    client = redis.Redis.from_url(fresh_redis.url)
    client.set(broken.key, "not a hash")  # HMGET on it is a script error

    async def scenario() -> tuple[list[Any], list[Any]]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            fine = requests_bucket(name="fine", capacity=10)
            answers = await asyncio.gather(
                *(store.admit(admission(buckets=(broken,))) for _ in range(3)),
                *(store.admit(admission(buckets=(fine,))) for _ in range(3)),
                return_exceptions=True,
            )
            return list(answers[:3]), list(answers[3:])
        finally:
            await store.close()

    failed, served = asyncio.run(scenario())
    assert all(type(a).__name__ == "StoreUnavailable" for a in failed)
    assert [a.allowed for a in served] == [True] * 3


def test_a_settlement_waits_for_the_next_admission_and_runs_before_it(
    fresh_redis: RedisServer,
) -> None:
    """A settlement can wait (its response has gone out) and rides with the next turn's
    admissions, ahead of them: the slot it frees is free for the admission behind it.
    Alone, it goes out within the wait."""
    slot = lease(name="one-slot", limit=1)

    def freeing(request: AdmissionRequest, answer: Admission) -> Settlement:
        return settlement_for(
            request, answer, actual_tokens=0, actual_cost_usd=Decimal(0), release_leases=True
        )

    async def scenario() -> tuple[list[bool], float]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            first = admission(leases=(slot,))
            held = await store.admit(first)
            settling = asyncio.ensure_future(store.settle_many([freeing(first, held)]))
            await asyncio.sleep(0)  # the settlement is queued, not yet written
            second = admission(leases=(slot,))
            behind = await store.admit(second)
            assert await settling == [True]
            started = time.monotonic()
            assert await store.settle_many([freeing(second, behind)]) == [True]
            waited = time.monotonic() - started
            last = await store.admit(admission(leases=(slot,)))
            return [held.allowed, behind.allowed, last.allowed], waited
        finally:
            await store.close()

    allowed, waited = asyncio.run(scenario())
    assert allowed == [True, True, True]
    assert waited < 0.5


def test_a_settlement_that_cannot_wait_goes_out_at_once_and_takes_the_waiting_along(
    fresh_redis: RedisServer,
) -> None:
    """With company 30 s away, a settlement that may wait is still unsent after a moment;
    one that may not (nothing else will come to carry it) is written at once, and the
    same write carries the one that was waiting: both slots are free."""
    slot = lease(name="two-slots", limit=2)

    def freeing(request: AdmissionRequest, answer: Admission) -> Settlement:
        return settlement_for(
            request, answer, actual_tokens=0, actual_cost_usd=Decimal(0), release_leases=True
        )

    async def scenario() -> tuple[bool, list[bool], list[bool], bool]:
        client = redis_client(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        store = RedisLimitStore(
            client, timeout_seconds=TIMEOUT, cluster=False, company_wait_seconds=30.0
        )
        await store.load_scripts()
        try:
            first, second = admission(leases=(slot,)), admission(leases=(slot,))
            held = [await store.admit(first), await store.admit(second)]
            waiting = asyncio.ensure_future(
                store.settle_many([freeing(first, held[0])], can_wait=True)
            )
            done, _ = await asyncio.wait({waiting}, timeout=0.3)
            waited = not done
            at_once = await asyncio.wait_for(
                store.settle_many([freeing(second, held[1])], can_wait=False), 5.0
            )
            carried = await asyncio.wait_for(waiting, 5.0)
            both_free = [(await store.admit(admission(leases=(slot,)))).allowed for _ in range(2)]
            return waited, at_once, carried, all(both_free)
        finally:
            await store.close()

    waited, at_once, carried, both_free = asyncio.run(scenario())
    assert waited, "a settlement that can wait went out alone before its company wait"
    assert at_once == [True] and carried == [True]
    assert both_free
