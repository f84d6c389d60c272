"""What clients are told: OpenAI rate-limit headers, 429 errors, and queueing."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from gateway.errors import QuotaExceeded, RateLimited
from gateway.limits import (
    MemoryLimitStore,
    admit_waiting,
    format_duration,
    rate_limit_headers,
    refusal_error,
)
from tests.limits.builders import admission, lease, requests_bucket, rolling_budget, tokens_bucket


class SteppedClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_durations_read_like_openais() -> None:
    assert [format_duration(s) for s in (0.02, 1, 1.5, 60, 360, 3723.25)] == [
        "20ms",
        "1s",
        "1.5s",
        "1m0s",
        "6m0s",
        "1h2m3.25s",
    ]
    # nothing to wait for reads 0ms, whatever the clocks made of it; a fraction is a whole ms
    nothing = (0.0, -0.0, -2.5, float("nan"))
    assert [format_duration(s) for s in nothing] == ["0ms"] * 4
    assert format_duration(0.0004) == "1ms"


def test_headers_describe_the_tightest_buckets() -> None:
    async def scenario() -> dict[str, str]:
        store = MemoryLimitStore(clock=SteppedClock())
        answer = await store.admit(
            admission(
                buckets=(
                    requests_bucket(capacity=60, per_second=1.0),
                    tokens_bucket(capacity=1000, per_second=10.0, amount=250),
                )
            )
        )
        return rate_limit_headers(answer)

    assert asyncio.run(scenario()) == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "750",
        "x-ratelimit-reset-tokens": "25s",
    }


def test_refusals_become_429s_naming_the_limit() -> None:
    async def scenario() -> None:
        store = MemoryLimitStore(clock=SteppedClock())
        bucket = requests_bucket(capacity=1, per_second=0.5)
        await store.admit(admission(buckets=(bucket,)))
        error = refusal_error(await store.admit(admission(buckets=(bucket,))))
        assert isinstance(error, RateLimited)
        assert error.code == "rate_limit_exceeded"
        assert "requests per minute on key" in error.message
        assert error.response_headers()["retry-after"] == "2"
        assert error.response_headers()["x-ratelimit-remaining-requests"] == "0"

        never = refusal_error(await store.admit(admission(buckets=(tokens_bucket(amount=5000),))))
        assert "can never fit" in never.message
        assert never.retry_after is None
        assert never.response_headers()["x-should-retry"] == "false"

        await store.admit(admission(leases=(lease(limit=1),)))
        busy = refusal_error(await store.admit(admission(leases=(lease(limit=1),))))
        assert isinstance(busy, RateLimited) and "concurrent" in busy.message

        await store.admit(admission(budgets=(rolling_budget("1", "0.75"),)))
        broke = refusal_error(await store.admit(admission(budgets=(rolling_budget("1", "0.75"),))))
        assert isinstance(broke, QuotaExceeded)
        assert broke.code == "insufficient_quota" and broke.status == 429
        assert "$1" in broke.message and "$0.75" in broke.message

    asyncio.run(scenario())


def test_queueing_waits_for_the_bucket_instead_of_refusing() -> None:
    async def scenario() -> None:
        clock = SteppedClock()
        store = MemoryLimitStore(clock=clock)
        bucket = requests_bucket(capacity=1, per_second=2.0)
        await store.admit(admission(buckets=(bucket,)))
        waited = await admit_waiting(
            store,
            admission(buckets=(bucket,)),
            max_wait_seconds=1.0,
            clock=clock,
            sleep=clock.sleep,
        )
        assert waited.allowed
        assert 1000.49 < clock.now < 1000.51
        too_short = await admit_waiting(
            store,
            admission(buckets=(bucket,)),
            max_wait_seconds=0.2,
            clock=clock,
            sleep=clock.sleep,
        )
        assert not too_short.allowed
        never = await admit_waiting(
            store,
            admission(buckets=(tokens_bucket(amount=10**6),)),
            max_wait_seconds=60,
            clock=clock,
            sleep=clock.sleep,
        )
        assert never.never_fits and clock.now < 1000.52

    asyncio.run(scenario())


def test_budget_exhaustion_is_not_queued() -> None:
    async def scenario() -> None:
        clock = SteppedClock()
        store = MemoryLimitStore(clock=clock)
        await store.admit(admission(budgets=(rolling_budget("1", "0.9"),)))
        answer = await admit_waiting(
            store,
            admission(budgets=(rolling_budget("1", "0.9"),)),
            max_wait_seconds=3600,
            clock=clock,
            sleep=clock.sleep,
        )
        assert answer.refused_kind == "budget" and clock.now == 1000.0

    asyncio.run(scenario())


def test_micro_dollar_rounding_never_undercharges() -> None:
    from gateway.limits.spec import usd_to_micros

    assert usd_to_micros(Decimal("0.0000001")) == 1
    assert usd_to_micros(Decimal("1.9999999"), round_up=False) == 1_999_999
