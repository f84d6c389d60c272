"""The admin store contract, against the in-memory store and a real redis-server: a
change is all or nothing with its audit entry, the version moves once per change,
snapshots read what was written, the audit stream is capped, sessions expire."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from gateway.admin import (
    AdminStore,
    Change,
    Expect,
    MemoryAdminStore,
    RedisAdminStore,
    TenantRecord,
)
from gateway.errors import StoreUnavailable
from tests.limits.cluster import RedisCluster3
from tests.support.redis_server import RedisServer

Scenario = Callable[[AdminStore], Coroutine[Any, Any, Any]]


def tenant_json(tenant_id: str, **fields: Any) -> str:
    return TenantRecord(id=tenant_id, created_at=1.0, created_by="t", **fields).model_dump_json()


def create(tenant_id: str, **fields: Any) -> Change:
    return Change(
        "tenant.create",
        tenant_id,
        expect=(Expect("tenants", tenant_id, "absent", "exists"),),
        write=(("tenants", tenant_id, tenant_json(tenant_id, **fields)),),
        audit={"actor": "alice", "action": "tenant.create", "target": tenant_id},
    )


@pytest.fixture(params=["memory", "redis"])
def run(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Callable[..., Any]]:
    flush = redis.Redis.from_url(redis_server.url)
    flush.flushdb()

    def runner(scenario: Scenario, audit_entries: int = 100) -> Any:
        async def go() -> Any:
            if request.param == "memory":
                return await scenario(MemoryAdminStore(audit_entries))
            client = aioredis.from_url(redis_server.url)
            try:
                return await scenario(RedisAdminStore(client, "gw", audit_entries))
            finally:
                await client.aclose()

        return asyncio.run(go())

    yield runner
    flush.close()


def test_a_change_writes_its_records_moves_the_version_and_is_audited(run: Any) -> None:
    async def scenario(store: AdminStore) -> None:
        assert await store.version() == 0
        applied = await store.apply(create("acme"))
        assert applied.failed is None and applied.version == 1
        snapshot = await store.snapshot()
        assert snapshot.version == 1
        assert set(snapshot.tenants) == {"acme"}
        assert snapshot.tenant_json["acme"] == tenant_json("acme")
        [entry] = await store.audit(10)
        assert entry.fields["actor"] == "alice"
        assert entry.fields["target"] == "acme"
        assert entry.fields["version"] == "1"

    run(scenario)


def test_a_failed_expectation_writes_nothing_and_names_itself(run: Any) -> None:
    async def scenario(store: AdminStore) -> None:
        await store.apply(create("acme"))
        # second expectation fails after the first held: still nothing written
        change = Change(
            "key.create",
            "k1",
            expect=(
                Expect("tenants", "acme", "present", "no tenant"),
                Expect("tenants", "acme", "equal", "changed meanwhile", value="stale"),
            ),
            write=(("keys", "k1", "{}"), ("hashes", "sha256:x", "k1")),
            audit={"action": "key.create"},
        )
        applied = await store.apply(change)
        assert applied.failed is not None and applied.failed.refusal == "changed meanwhile"
        assert await store.version() == 1
        snapshot = await store.snapshot()
        assert snapshot.keys == {}
        assert len(await store.audit(10)) == 1
        again = await store.apply(create("acme"))
        assert again.failed is not None and again.failed.refusal == "exists"

    run(scenario)


def test_compare_and_set_and_deletes(run: Any) -> None:
    async def scenario(store: AdminStore) -> None:
        await store.apply(create("acme"))
        stored = (await store.snapshot()).tenant_json["acme"]
        update = Change(
            "tenant.update",
            "acme",
            expect=(Expect("tenants", "acme", "equal", "changed", value=stored),),
            write=(("tenants", "acme", tenant_json("acme", allow_overrides=True)),),
        )
        assert (await store.apply(update)).failed is None
        assert (await store.snapshot()).tenants["acme"].allow_overrides is True
        # the same compare-and-set again: the record is no longer what it expects
        assert (await store.apply(update)).failed is not None
        gone = Change("tenant.delete", "acme", delete=(("tenants", "acme"),))
        assert (await store.apply(gone)).version == 3
        assert (await store.snapshot()).tenants == {}

    run(scenario)


def test_audit_is_newest_first_and_capped(run: Any) -> None:
    async def scenario(store: AdminStore) -> list[str]:
        for i in range(250):
            await store.apply(create(f"t{i}"))
        entries = await store.audit(1000)
        return [e.fields["target"] for e in entries]

    targets = run(scenario, audit_entries=5)
    assert targets[:5] == ["t249", "t248", "t247", "t246", "t245"]
    # Redis trims approximately (MAXLEN ~), whole nodes of 100 entries at a time
    assert 5 <= len(targets) <= 150


def test_sessions_expire_and_end(run: Any) -> None:
    async def scenario(store: AdminStore) -> None:
        await store.open_session("h1", ttl_seconds=1)
        await store.open_session("h2", ttl_seconds=60)
        assert await store.session_alive("h1")
        await store.end_session("h2")
        assert not await store.session_alive("h2")
        assert not await store.session_alive("never")
        await asyncio.sleep(1.2)
        assert not await store.session_alive("h1")

    run(scenario)


def test_redis_down_is_store_unavailable_not_a_hang() -> None:
    server = RedisServer()
    server.start()
    url = server.url
    server.stop()

    async def scenario() -> None:
        client = aioredis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        store = RedisAdminStore(client)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="admin store"):
            await store.apply(create("acme"))
        with pytest.raises(StoreUnavailable):
            await store.version()
        assert time.monotonic() - started < 5
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli creates the cluster")
def test_every_operation_works_on_a_redis_cluster() -> None:
    """One hash tag for the whole admin state: each script's keys share a slot."""
    cluster = RedisCluster3()
    cluster.start()
    try:

        async def scenario() -> None:
            client = aioredis.RedisCluster.from_url(cluster.url)
            store = RedisAdminStore(client)
            try:
                assert (await store.apply(create("acme"))).version == 1
                assert (await store.apply(create("acme"))).failed is not None
                snapshot = await store.snapshot()
                assert set(snapshot.tenants) == {"acme"} and await store.version() == 1
                assert [e.fields["target"] for e in await store.audit(5)] == ["acme"]
                await store.open_session("h", 60)
                assert await store.session_alive("h")
            finally:
                await client.aclose()

        asyncio.run(scenario())
    finally:
        cluster.stop()
