"""Three gateway replicas (OS processes, each with its own Redis client) share one limit."""

from __future__ import annotations

import multiprocessing
import time
from decimal import Decimal
from typing import Any

import redis

from gateway.limits import BucketTake, BudgetReserve
from tests.limits.workers import run_replica
from tests.support.redis_server import RedisServer

REPLICAS = 3


def run_replicas(job: str, url: str, counts: list[int], spec: Any) -> tuple[list[Any], float]:
    """Run `job` in one process per count, started together; results and the seconds
    from start to the last finish."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    processes = [
        context.Process(target=run_replica, args=(job, url, count, seed, start, results, spec))
        for seed, count in enumerate(counts)
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # let every replica import and wait on the start line
    start.set()
    reports = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    began = min(report["began"] for report in reports)
    ended = max(report["ended"] for report in reports)
    return [report["result"] for report in reports], ended - began


def test_burst_of_500_against_100_per_minute_admits_exactly_100(
    redis_server: RedisServer,
) -> None:
    bucket = BucketTake("gw:{t:burst}:rl:key:k1:req", 100, 100 / 60, 1, "key k1", "requests")
    admitted, seconds = run_replicas("burst", redis_server.url, [167, 167, 166], bucket)
    # a continuous bucket refills 100/60 per second: that much more may enter while the
    # burst runs (nothing when it takes under 0.6 s)
    refilled = int(seconds * 100 / 60)
    assert 100 <= sum(admitted) <= 100 + refilled, (admitted, seconds)


def test_tokens_per_minute_hold_across_replicas(redis_server: RedisServer) -> None:
    per_minute = 10_000
    bucket = BucketTake(
        "gw:{t:tok}:rl:tenant:tok", per_minute, per_minute / 60, 0, "tenant tok", "tokens"
    )
    reports, seconds = run_replicas("tokens", redis_server.url, [150, 150, 150], bucket)
    used = sum(report["used"] for report in reports)
    largest = max(report["largest"] for report in reports)
    allowance = per_minute + seconds * per_minute / 60
    assert sum(report["admitted"] for report in reports) > 10
    # real usage never exceeds what the bucket held plus refill, give or take one
    # request's reservation
    assert used <= allowance + largest, (used, allowance, largest)
    # and the bucket was really used: refusals start only once less than one request's
    # reservation is left, and each request uses at least a fifth of its reservation
    assert used >= (per_minute - largest) // 5


def test_thousand_concurrent_requests_never_overspend_one_dollar(
    redis_server: RedisServer,
) -> None:
    budget = BudgetReserve(
        "gw:{t:spend}:budget:tenant:day:2026-11-30",
        limit_usd=Decimal("1"),
        amount_usd=Decimal("0.004"),
        scope="tenant spend (day)",
        period="day",
        period_end=int(time.time()) + 86_400,
    )
    reports, _ = run_replicas("budget", redis_server.url, [334, 333, 333], budget)
    spent = sum((Decimal(report["spent"]) for report in reports), Decimal(0))
    assert spent <= Decimal("1")
    assert sum(report["admitted"] for report in reports) >= 250
    with redis.Redis.from_url(redis_server.url) as client:
        recorded = int(client.hget(budget.key, "spent") or 0)
    # the counter holds exactly the settled real costs, to the micro-dollar
    assert recorded == int(spent * 1_000_000)
