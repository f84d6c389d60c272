"""The labels store contract, on Redis (a real redis-server) and in memory: a label is
stored once per tenant, request id and metric however often it is added, survives a new
client (a restarted gateway), is bounded, and carries its TTL; spend adds up per day."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest
import redis.asyncio as aioredis

from gateway.evaluation.labels import JUDGED, Label, RequestNote
from gateway.evaluation.redis_store import RedisLabelStore
from gateway.evaluation.store import LabelStore, MemoryLabelStore
from tests.support.redis_server import RedisServer


def label(
    request_id: str, metric: str = JUDGED, tenant: str = "acme", served: float = 0.25
) -> Label:
    return Label(
        request_id=request_id,
        metric=metric,
        source="judge" if metric == JUDGED else "feedback",
        tenant=tenant,
        route="auto",
        served_model="small",
        kind="chat",
        time=1.0,
        served_quality=served,
        reference_quality=1 - served if metric == JUDGED else None,
    )


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    yield redis_server.url


def open_store(kind: str, url: str, prefix: str, max_labels: int = 1000) -> LabelStore:
    if kind == "memory":
        return MemoryLabelStore(max_labels)
    client = aioredis.from_url(url)
    return RedisLabelStore(client, prefix, ttl_seconds=3600, max_labels=max_labels)


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return f"t{abs(hash(request.node.nodeid))}:"


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def test_a_label_is_stored_once_per_request_and_metric(
    store_kind: str, redis_url: str, prefix: str
) -> None:
    async def scenario() -> None:
        store = open_store(store_kind, redis_url, prefix)
        assert await store.add(label("r1")) is True
        assert await store.add(label("r1", served=0.75)) is False
        # another metric, and another tenant's request of the same id, are other labels
        assert await store.add(label("r1", metric="thumbs_up")) is True
        assert await store.add(label("r1", tenant="globex")) is True
        assert await store.has("acme", "r1", JUDGED)
        assert not await store.has("acme", "r2", JUDGED)
        stored = await store.recent(10)
        assert [(x.tenant, x.metric) for x in stored] == [
            ("globex", JUDGED),
            ("acme", "thumbs_up"),
            ("acme", JUDGED),
        ]
        assert (
            next(x for x in stored if x.metric == JUDGED and x.tenant == "acme").served_quality
            == 0.25
        )

    run(scenario())


def test_labels_outlive_the_client_that_wrote_them(redis_url: str, prefix: str) -> None:
    async def write() -> None:
        client = aioredis.from_url(redis_url)
        await RedisLabelStore(client, prefix, ttl_seconds=60, max_labels=100).add(label("kept"))
        await client.aclose()

    async def read_again() -> tuple[list[Label], bool, int]:
        client = aioredis.from_url(redis_url)
        store = RedisLabelStore(client, prefix, ttl_seconds=60, max_labels=100)
        added = await store.add(label("kept"))
        ttl = await client.ttl(f"{prefix}{{eval}}:label:acme:kept:{JUDGED}")
        labels = await store.recent(10)
        await client.aclose()
        return labels, added, ttl

    run(write())
    labels, added, ttl = run(read_again())  # type: ignore[misc]
    assert [x.request_id for x in labels] == ["kept"]
    assert added is False
    assert 0 < ttl <= 60


def test_the_store_is_bounded(store_kind: str, redis_url: str, prefix: str) -> None:
    async def scenario() -> int:
        store = open_store(store_kind, redis_url, prefix, max_labels=100)
        for n in range(400):
            await store.add(label(f"r{n}"))
        return len(await store.recent(10_000))

    kept = run(scenario())
    # Redis trims approximately (MAXLEN ~): whole nodes of the stream at a time
    assert isinstance(kept, int) and 100 <= kept < 400


def test_notes_are_found_by_their_own_tenant_only(
    store_kind: str, redis_url: str, prefix: str
) -> None:
    async def scenario() -> tuple[object, object]:
        store = open_store(store_kind, redis_url, prefix)
        note = RequestNote(
            request_id="n1",
            tenant="acme",
            route="auto",
            served_model="small",
            kind="code",
            time=1.0,
        )
        await store.note([note])
        return await store.request_note("acme", "n1"), await store.request_note("globex", "n1")

    mine, theirs = run(scenario())  # type: ignore[misc]
    assert isinstance(mine, RequestNote) and mine.kind == "code"
    assert theirs is None


def test_spend_adds_up_per_tenant_and_day(store_kind: str, redis_url: str, prefix: str) -> None:
    async def scenario() -> list[Decimal]:
        store = open_store(store_kind, redis_url, prefix)
        await store.add_spend("acme", "2026-01-01", Decimal("0.000125"))
        total = await store.add_spend("acme", "2026-01-01", Decimal("0.25"))
        return [
            total,
            await store.spend("acme", "2026-01-01"),
            await store.spend("globex", "2026-01-01"),
        ]

    assert run(scenario()) == [Decimal("0.250125"), Decimal("0.250125"), Decimal(0)]


def test_reservations_made_at_once_never_pass_the_cap(
    store_kind: str, redis_url: str, prefix: str
) -> None:
    async def scenario() -> tuple[list[bool], Decimal]:
        store = open_store(store_kind, redis_url, prefix)
        await store.add_spend("acme", "2026-01-01", Decimal("0.1"))
        granted = await asyncio.gather(
            *(
                store.reserve_spend("acme", "2026-01-01", Decimal("0.3"), Decimal("1"))
                for _ in range(8)
            )
        )
        return list(granted), await store.spend("acme", "2026-01-01")

    granted, total = run(scenario())  # type: ignore[misc]
    # 0.1 + 3 x 0.3 fits within 1.0, a fourth would not
    assert granted.count(True) == 3
    assert total == Decimal("1.0")
