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
    KeyRecord,
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


def key_json(key_id: str, revoked_at: float | None = None) -> str:
    return KeyRecord(
        id=key_id,
        tenant="acme",
        hash="sha256:" + f"{int(key_id[1:]):064x}",
        hint="abcd",
        created_at=1.0,
        created_by="t",
        revoked_at=revoked_at,
    ).model_dump_json()


def issue(key_id: str) -> Change:
    return Change(
        "key.create",
        key_id,
        expect=tuple(Expect(table, key_id, "absent", "used") for table in ("keys", "revoked")),
        write=(("keys", key_id, key_json(key_id)),),
    )


def revoke(key_id: str, live: str) -> Change:
    return Change(
        "key.revoke",
        key_id,
        expect=(Expect("keys", key_id, "equal", "changed", value=live),),
        write=(("revoked", key_id, key_json(key_id, revoked_at=2.0)),),
        delete=(("keys", key_id),),
    )


def test_a_revocation_moves_the_record_out_of_what_a_snapshot_reads(run: Any) -> None:
    async def scenario(store: AdminStore) -> None:
        await store.apply(create("acme"))
        for i in range(50):
            assert (await store.apply(issue(f"k{i}"))).failed is None
            live = (await store.snapshot()).key_json[f"k{i}"]
            assert (await store.apply(revoke(f"k{i}", live))).failed is None
        await store.apply(issue("k50"))
        snapshot = await store.snapshot()
        assert set(snapshot.keys) == set(snapshot.key_json) == {"k50"}
        assert (snapshot.revoked, snapshot.misplaced) == (50, 0)
        revoked = await store.revoked()
        assert len(revoked) == 50 and revoked["k7"] == key_json("k7", revoked_at=2.0)
        assert await store.revoked(["k7", "k50", "never"]) == {"k7": revoked["k7"]}
        assert await store.revoked([]) == {}
        # the id of a revoked key is refused, in the same change that writes it
        reused = await store.apply(issue("k7"))
        assert reused.failed is not None and reused.failed.table == "revoked"
        # a compare-and-set on a record that moved fails
        stale = await store.apply(revoke("k7", key_json("k7")))
        assert stale.failed is not None and stale.failed.refusal == "changed"

    run(scenario)


def test_revoked_records_an_older_gateway_left_among_the_live_ones_move_out() -> None:
    """A store written before the revoked table: its revoked records sit in the keys
    hash. A snapshot leaves them out and moves them, verbatim and without a version bump;
    their ids stay refused and the listing still finds them."""
    server = RedisServer()
    server.start()
    try:
        sync = redis.Redis.from_url(server.url)
        legacy = {f"k{i}": key_json(f"k{i}", revoked_at=2.0) for i in range(30)}
        sync.hset("gw:{admin}:keys", mapping={**legacy, "k99": key_json("k99")})
        sync.hset("gw:{admin}:tenants", "acme", tenant_json("acme"))
        sync.set("gw:{admin}:version", 40)

        async def scenario() -> None:
            client = aioredis.from_url(server.url)
            store = RedisAdminStore(client)
            try:
                first = await store.snapshot()
                assert set(first.keys) == {"k99"} and set(first.key_json) == {"k99"}
                assert (first.version, first.revoked, first.misplaced) == (40, 30, 30)
                assert sync.hkeys("gw:{admin}:keys") == [b"k99"]
                assert await store.revoked() == legacy
                second = await store.snapshot(first)
                assert (second.version, second.revoked, second.misplaced) == (40, 30, 0)
                assert second.keys["k99"] is first.keys["k99"]
                reused = await store.apply(issue("k3"))
                assert reused.failed is not None and reused.failed.table == "revoked"
            finally:
                await client.aclose()

        asyncio.run(scenario())
        sync.close()
    finally:
        server.stop()


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
                assert (await store.apply(issue("k1"))).failed is None
                live = (await store.snapshot()).key_json["k1"]
                assert (await store.apply(revoke("k1", live))).failed is None
                assert (await store.snapshot()).revoked == 1
                assert list(await store.revoked(["k1"])) == list(await store.revoked()) == ["k1"]
                # an older gateway's revoked record among the live ones moves out
                await client.hset("gw:{admin}:keys", "k2", key_json("k2", revoked_at=2.0))
                assert (await store.snapshot()).misplaced == 1
                assert set(await store.revoked()) == {"k1", "k2"}
            finally:
                await client.aclose()

        asyncio.run(scenario())
    finally:
        cluster.stop()
