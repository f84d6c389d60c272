"""The evaluation job journal on a real redis-server: a recorded job is held by its
recorder until finished, claimed by another process only once its lease has run out
(and never while its holder renews it), given up after max_attempts deliveries, bounded
(trimmed jobs are counted when claimed), and carries the request's note in the same
write. An evaluator that claims a job already labelled acknowledges it without calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from gateway.evaluation.daily_cap import DailyCap
from gateway.evaluation.evaluator import (
    CallAnswer,
    EvaluationJob,
    Evaluator,
    decode_job,
    encode_job,
)
from gateway.evaluation.journal import RedisJobJournal
from gateway.evaluation.labels import JUDGED, Label, RequestNote, encode
from gateway.evaluation.redis_store import RedisLabelStore
from gateway.observability.evaluation_metrics import EvaluationMetrics
from tests.support.redis_server import RedisServer


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return f"j{abs(hash(request.node.nodeid))}:"


def journal(
    client: Any, prefix: str, name: str, *, lease: float = 0.2, attempts: int = 3, jobs: int = 1000
) -> RedisJobJournal:
    return RedisJobJournal(
        client,
        prefix,
        lease_seconds=lease,
        max_attempts=attempts,
        max_jobs=jobs,
        note_ttl_seconds=60,
        consumer=name,
    )


def job(request_id: str) -> EvaluationJob:
    note = RequestNote(
        request_id=request_id,
        tenant="acme",
        route="auto",
        served_model="small",
        kind="chat",
        time=1.0,
    )
    return EvaluationJob(
        request_id=request_id,
        tenant="acme",
        charge_to="acme",
        route="auto",
        served_model="small",
        kind="chat",
        reference="big",
        judge="judge",
        daily_usd=Decimal(5),
        max_tokens=64,
        sample_rate=1.0,
        conversation=[("user", "hello")],
        messages=[{"role": "user", "content": "hello"}],
        answer="hi",
        note=note,
    )


def scenario(redis_server: RedisServer, body: Callable[[Any], Awaitable[None]]) -> None:
    async def run() -> None:
        client = aioredis.from_url(redis_server.url)
        try:
            await body(client)
        finally:
            await client.aclose()

    asyncio.run(run())


def test_a_job_is_claimed_by_another_only_after_its_lease_runs_out(
    redis_server: RedisServer, prefix: str
) -> None:
    async def body(client: Any) -> None:
        holder, other = journal(client, prefix, "holder"), journal(client, prefix, "other")
        recorded = encode_job(job("r1"))
        entry_id = await holder.record(recorded, None)
        assert (await other.claim(10)).jobs == []
        # renewed by its holder, it stays with it past a lease
        for _ in range(3):
            await asyncio.sleep(0.1)
            await holder.keep([entry_id])
        assert (await other.claim(10)).jobs == []
        await asyncio.sleep(0.3)
        claimed = await other.claim(10)
        assert [(c.entry_id, c.deliveries) for c in claimed.jobs] == [(entry_id, 2)]
        assert claimed.jobs[0].job == recorded
        assert decode_job(recorded).conversation == [("user", "hello")]
        await other.finish(entry_id)
        await asyncio.sleep(0.3)
        assert (await holder.claim(10)).jobs == []
        assert await client.xlen(holder.key) == 0

    scenario(redis_server, body)


def test_a_released_job_is_claimed_at_once(redis_server: RedisServer, prefix: str) -> None:
    async def body(client: Any) -> None:
        stopping = journal(client, prefix, "stopping", lease=30)
        successor = journal(client, prefix, "successor", lease=30)
        entry_id = await stopping.record(encode_job(job("handed-over")), None)
        assert (await successor.claim(10)).jobs == []
        await stopping.release([entry_id])
        assert [c.entry_id for c in (await successor.claim(10)).jobs] == [entry_id]

    scenario(redis_server, body)


def test_a_job_that_keeps_failing_is_given_up_after_max_attempts(
    redis_server: RedisServer, prefix: str
) -> None:
    async def body(client: Any) -> None:
        workers = [journal(client, prefix, f"w{n}", lease=0.05, attempts=2) for n in range(3)]
        await workers[0].record(encode_job(job("poison")), None)
        await asyncio.sleep(0.1)
        # the second delivery runs; the third is past max_attempts
        assert len((await workers[1].claim(10)).jobs) == 1
        await asyncio.sleep(0.1)
        third = await workers[2].claim(10)
        assert third.jobs == [] and third.given_up == 1
        assert await client.xlen(workers[0].key) == 0
        pending = await client.xpending(workers[0].key, "evaluators")
        assert pending["pending"] == 0

    scenario(redis_server, body)


def test_the_journal_is_bounded_and_trimmed_jobs_are_counted(
    redis_server: RedisServer, prefix: str
) -> None:
    async def body(client: Any) -> None:
        writer = journal(client, prefix, "writer", lease=0.05, jobs=10)
        for n in range(300):
            await writer.record(encode_job(job(f"r{n}")), None)
        # MAXLEN ~ trims whole stream nodes (100 entries each by default)
        assert await client.xlen(writer.key) <= 110
        await asyncio.sleep(0.1)
        claimed = await journal(client, prefix, "claimer", lease=0.05).claim(1000)
        assert claimed.trimmed > 0
        assert len(claimed.jobs) + claimed.trimmed == 300

    scenario(redis_server, body)


def test_the_note_is_written_with_the_job(redis_server: RedisServer, prefix: str) -> None:
    async def body(client: Any) -> None:
        holder = journal(client, prefix, "holder")
        sampled = job("noted")
        await holder.record(encode_job(sampled), ("acme", "noted", encode(sampled.note)))
        store = RedisLabelStore(client, prefix, ttl_seconds=60, max_labels=100)
        note = await store.request_note("acme", "noted")
        assert note == sampled.note
        assert 0 < await client.ttl(f"{prefix}{{eval}}:req:acme:noted") <= 60

    scenario(redis_server, body)


def test_an_evaluator_acknowledges_a_claimed_job_that_is_labelled_already(
    redis_server: RedisServer, prefix: str
) -> None:
    async def never(*args: Any) -> CallAnswer:
        raise AssertionError("a labelled job is not evaluated again")

    async def body(client: Any) -> None:
        store = RedisLabelStore(client, prefix, ttl_seconds=60, max_labels=100)
        dead = journal(client, prefix, "dead", lease=0.05)
        await dead.record(encode_job(job("done")), None)
        # the dead process stored the label, then died before acknowledging
        await store.add(
            Label(
                request_id="done",
                metric=JUDGED,
                source="judge",
                tenant="acme",
                route="auto",
                served_model="small",
                kind="chat",
                time=1.0,
                served_quality=0.5,
                reference_quality=0.5,
            )
        )
        registry = CollectorRegistry()
        evaluator = Evaluator(store, never, EvaluationMetrics(registry), queue_size=8, workers=1)
        evaluator.journal = journal(client, prefix, "alive", lease=0.05)
        await asyncio.sleep(0.1)
        await evaluator.start()
        for _ in range(100):  # five seconds at most
            if not await client.xlen(dead.key):
                break
            await asyncio.sleep(0.05)
        await evaluator.stop()
        assert await client.xlen(dead.key) == 0
        assert registry.get_sample_value("gateway_evaluation_reclaimed_total") == 1
        assert (
            registry.get_sample_value(
                "gateway_evaluation_dropped_total", {"reason": "already_labelled"}
            )
            == 1
        )
        assert len(await store.recent(10)) == 1

    scenario(redis_server, body)


def test_a_daily_cap_reservation_is_settled_to_the_real_cost(
    redis_server: RedisServer, prefix: str
) -> None:
    async def body(client: Any) -> None:
        store = RedisLabelStore(client, prefix, ttl_seconds=60, max_labels=100)
        cap = DailyCap(store, "acme", "2026-01-01", Decimal("1"))
        assert await cap.reserve(Decimal("0.75"))
        # the cap has room for 0.25 more until the first call settles
        assert not await DailyCap(store, "acme", "2026-01-01", Decimal("1")).reserve(Decimal("0.5"))
        await cap.settle(Decimal("0.125"))
        assert await store.spend("acme", "2026-01-01") == Decimal("0.125")
        assert await DailyCap(store, "acme", "2026-01-01", Decimal("1")).reserve(Decimal("0.5"))

    scenario(redis_server, body)
