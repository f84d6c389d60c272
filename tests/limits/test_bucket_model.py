"""Property tests: the stores behave like a textbook token bucket (exact rational
arithmetic, a clock the test controls)."""

from __future__ import annotations

import asyncio
import uuid
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.limits import BucketTake, MemoryLimitStore, RedisLimitStore
from tests.limits.builders import admission
from tests.support.redis_server import RedisServer

# decisions closer than this to the boundary may go either way in floating point
EPSILON = 1e-6


class ReferenceBucket:
    """Holds up to `capacity`; refills `rate` per second continuously; starts full."""

    def __init__(self, capacity: int, rate: Fraction) -> None:
        self.capacity = Fraction(capacity)
        self.rate = rate
        self.tokens = Fraction(capacity)
        self.last = Fraction(0)

    def at(self, now: Fraction) -> Fraction:
        return min(self.capacity, self.tokens + (now - self.last) * self.rate)

    def settle_time(self, now: Fraction) -> None:
        self.tokens, self.last = self.at(now), now


class FakeClock:
    def __init__(self) -> None:
        self.now = Fraction(1_000_000)

    def __call__(self) -> float:
        return float(self.now)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("wait"), st.integers(min_value=0, max_value=5_000)),  # ms
        st.tuples(st.just("take"), st.integers(min_value=1, max_value=12)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=10),
    per_minute=st.integers(min_value=1, max_value=600),
    ops=operations,
)
def test_memory_store_matches_the_reference_bucket(
    capacity: int, per_minute: int, ops: list[tuple[str, int]]
) -> None:
    rate = Fraction(per_minute, 60)
    clock = FakeClock()
    store = MemoryLimitStore(clock=clock)
    model = ReferenceBucket(capacity, rate)
    start = clock.now

    async def run() -> None:
        for kind, value in ops:
            if kind == "wait":
                clock.now += Fraction(value, 1000)
                continue
            take = BucketTake("b", capacity, float(rate), value, "b", "tokens")
            answer = await store.admit(admission(buckets=(take,)))
            now = clock.now - start
            available = model.at(now)
            if value > capacity:
                assert answer.never_fits and not answer.allowed
                continue
            if abs(float(available) - value) > EPSILON:
                assert answer.allowed == (available >= value)
            model.settle_time(now)
            if answer.allowed:
                model.tokens -= value
            else:
                wait = (value - available) / rate
                assert answer.retry_after_seconds is not None
                assert abs(answer.retry_after_seconds - float(wait)) < 1e-6
            assert answer.tokens is not None
            assert abs(answer.tokens.remaining - float(model.tokens)) < 1e-6

    asyncio.run(run())


@settings(max_examples=150, deadline=None)
@given(
    capacities=st.tuples(st.integers(1, 8), st.integers(1, 8)),
    takes=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=30),
)
def test_a_refused_request_takes_from_no_bucket(
    capacities: tuple[int, int], takes: list[tuple[bool, bool]]
) -> None:
    """Requests touching bucket A, B or both: each bucket admits exactly its capacity."""
    store = MemoryLimitStore(clock=FakeClock())
    buckets = [
        BucketTake(f"k{i}", cap, 1e-9, 1, f"k{i}", "requests") for i, cap in enumerate(capacities)
    ]
    left = list(capacities)

    async def run() -> None:
        for uses_a, uses_b in takes:
            chosen = [i for i, used in enumerate((uses_a, uses_b)) if used]
            answer = await store.admit(admission(buckets=tuple(buckets[i] for i in chosen)))
            fits = all(left[i] >= 1 for i in chosen)
            assert answer.allowed == fits
            if fits:
                for i in chosen:
                    left[i] -= 1

    asyncio.run(run())


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    capacity=st.integers(min_value=1, max_value=30),
    amounts=st.lists(st.integers(min_value=1, max_value=35), min_size=1, max_size=25),
)
def test_redis_store_matches_the_reference_bucket_at_coarse_grain(
    redis_server: RedisServer, capacity: int, amounts: list[int]
) -> None:
    """Redis keeps its own clock, so the comparison uses a bucket that refills too slowly
    to matter while the test runs."""
    key = f"gw:{{t:model}}:rl:{uuid.uuid4().hex}:tok"
    rate = 1e-6

    async def run() -> list[tuple[bool, bool]]:
        store = await RedisLimitStore.open(redis_server.url, timeout_seconds=2, cluster=False)
        try:
            answers = []
            for amount in amounts:
                take = BucketTake(key, capacity, rate, amount, "b", "tokens")
                answer = await store.admit(admission(buckets=(take,)))
                answers.append((answer.allowed, answer.never_fits))
            return answers
        finally:
            await store.close()

    tokens = capacity
    expected = []
    for amount in amounts:
        fits = amount <= tokens
        expected.append((fits, amount > capacity))
        if fits:
            tokens -= amount
    assert asyncio.run(run()) == expected
