"""Code that runs in the separate OS processes of the multi-replica tests: each process
is one gateway replica with its own Redis client and event loop."""

from __future__ import annotations

import asyncio
import random
import time
from decimal import Decimal
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from gateway.limits import (
    AdmissionRequest,
    BucketTake,
    BudgetReserve,
    RedisLimitStore,
    settlement_for,
)


def run_replica(
    job: str, url: str, count: int, seed: int, start: Event, results: Queue[Any], spec: Any
) -> None:
    results.put(asyncio.run(_replica(job, url, count, seed, start, spec)))


async def _replica(
    job: str, url: str, count: int, seed: int, start: Event, spec: Any
) -> dict[str, Any]:
    store = await RedisLimitStore.open(url, timeout_seconds=10, cluster=False)
    try:
        await asyncio.to_thread(start.wait, 30)
        began = time.monotonic()
        result = await _JOBS[job](store, count, seed, spec)
        return {"result": result, "began": began, "ended": time.monotonic()}
    finally:
        await store.close()


async def _burst(store: RedisLimitStore, count: int, seed: int, bucket: BucketTake) -> int:
    """Fire `count` admissions in quick waves (so replicas interleave); how many got in."""
    admitted = 0
    for wave in range(0, count, 20):
        answers = await asyncio.gather(
            *(
                store.admit(AdmissionRequest(f"{seed}-{n}", buckets=(bucket,)))
                for n in range(wave, min(count, wave + 20))
            )
        )
        admitted += sum(answer.allowed for answer in answers)
        await asyncio.sleep(0.005)
    return admitted


async def _tokens(
    store: RedisLimitStore, count: int, seed: int, bucket: BucketTake
) -> dict[str, int]:
    """Requests reserving their worst case, settled with a real usage at or below it."""
    rng = random.Random(seed)
    used = 0
    admitted = 0
    largest = 0

    async def one(n: int) -> None:
        nonlocal used, admitted, largest
        expected = rng.randint(200, 1000)
        actual = rng.randint(expected // 5, expected)
        largest = max(largest, expected)
        take = BucketTake(
            bucket.key, bucket.capacity, bucket.refill_per_second, expected, bucket.scope, "tokens"
        )
        request = AdmissionRequest(f"{seed}-{n}", buckets=(take,))
        answer = await store.admit(request)
        if answer.allowed:
            admitted += 1
            used += actual
            await asyncio.sleep(rng.random() / 100)
            await store.settle(
                settlement_for(request, answer, actual_tokens=actual, actual_cost_usd=Decimal(0))
            )

    await asyncio.gather(*(one(n) for n in range(count)))
    return {"used": used, "admitted": admitted, "largest": largest}


async def _budget(
    store: RedisLimitStore, count: int, seed: int, budget: BudgetReserve
) -> dict[str, Any]:
    """Concurrent requests reserving a worst-case cost and settling a real one below it."""
    rng = random.Random(seed)
    spent = Decimal(0)
    admitted = 0

    async def one(n: int) -> None:
        nonlocal spent, admitted
        actual = Decimal(rng.randint(500, 4000)) / Decimal(1_000_000)
        request = AdmissionRequest(f"{seed}-{n}", budgets=(budget,))
        answer = await store.admit(request)
        if answer.allowed:
            admitted += 1
            spent += actual
            await asyncio.sleep(rng.random() / 100)
            await store.settle(
                settlement_for(request, answer, actual_tokens=0, actual_cost_usd=actual)
            )

    await asyncio.gather(*(one(n) for n in range(count)))
    return {"spent": str(spent), "admitted": admitted}


_JOBS: dict[str, Any] = {"burst": _burst, "tokens": _tokens, "budget": _budget}
