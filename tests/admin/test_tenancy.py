"""The admin API's operations over each store (memory, and a real redis-server): what a
process holds grows with the live keys only, while everything the API shows of revoked
keys stays as it was (listed as revoked, readable by id, their ids refused, a change of
one a 409 revoked, a tenant deletable once its keys are revoked), on a store written by
an older gateway too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from gateway.admin import AdminSnapshot, AdminStore, MemoryAdminStore, RedisAdminStore
from gateway.admin import decisions as decide
from gateway.admin.runtime_keys import RuntimeKeys
from gateway.admin.tenancy import TenancyAdmin
from gateway.errors import Conflict, NotFound
from gateway.settings.policy import Policy
from tests.support.redis_server import RedisServer

ADMIN = decide.Actor("alice", "10.0.0.1")
CHURNED = 40


class Outcomes:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def change(self, action: str, outcome: str) -> None:
        self.seen.append((action, outcome))


Scenario = Callable[[TenancyAdmin, RuntimeKeys], Coroutine[Any, Any, None]]


@pytest.fixture(params=["memory", "redis"])
def run(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Any]:
    flush = redis.Redis.from_url(redis_server.url)
    flush.flushdb()

    def runner(scenario: Scenario) -> None:
        async def go() -> None:
            client = aioredis.from_url(redis_server.url)
            store: AdminStore = (
                MemoryAdminStore() if request.param == "memory" else RedisAdminStore(client)
            )
            held: list[AdminSnapshot] = []
            keys = RuntimeKeys(store, held.append)
            try:
                await scenario(TenancyAdmin(keys, Policy, Outcomes()), keys)
            finally:
                await client.aclose()

        asyncio.run(go())

    yield runner
    flush.close()


async def churn(admin: TenancyAdmin, tenant: str, count: int) -> None:
    for i in range(count):
        await admin.issue_key(decide.NewKey(tenant=tenant, id=f"{tenant}-gone-{i}"), ADMIN)
        revoked = await admin.revoke_key(f"{tenant}-gone-{i}", ADMIN)
        assert revoked["status"] == "revoked"


def test_a_process_holds_only_live_keys_and_the_api_still_shows_the_revoked(run: Any) -> None:
    async def scenario(admin: TenancyAdmin, keys: RuntimeKeys) -> None:
        await admin.create_tenant(decide.NewTenant(id="team"), ADMIN)
        await admin.issue_key(decide.NewKey(tenant="team", id="stays"), ADMIN)
        await churn(admin, "team", CHURNED)
        assert await keys.sync() is False
        held = keys.snapshot
        assert set(held.keys) == set(held.key_json) == {"stays"}
        assert held.revoked == CHURNED
        listed = await admin.keys("team")
        assert len(listed) == CHURNED + 1
        assert {k["id"]: k["status"] for k in listed}["team-gone-7"] == "revoked"
        assert [k["id"] for k in listed] == sorted(k["id"] for k in listed)
        one = await admin.key("team-gone-3")
        assert one["status"] == "revoked" and one["revoked_at"] is not None
        with pytest.raises(NotFound):
            await admin.key("never-issued")
        # the live count of the tenant leaves the revoked ones out, as before
        assert (await admin.tenant("team"))["keys"] == 1

    run(scenario)


def test_revoked_ids_are_refused_and_a_change_of_one_is_a_409(run: Any) -> None:
    async def scenario(admin: TenancyAdmin, keys: RuntimeKeys) -> None:
        await admin.create_tenant(decide.NewTenant(id="team"), ADMIN)
        await churn(admin, "team", 3)
        with pytest.raises(Conflict, match="already used"):
            await admin.issue_key(decide.NewKey(tenant="team", id="team-gone-1"), ADMIN)
        for change in (
            admin.update_key("team-gone-1", decide.KeyPatch(models=None), ADMIN),
            admin.rotate_key("team-gone-1", decide.Rotation(), ADMIN),
            admin.revoke_key("team-gone-1", ADMIN),
        ):
            with pytest.raises(Conflict, match="is revoked") as raised:
                await change
            assert raised.value.code == "key_revoked"
        with pytest.raises(NotFound):
            await admin.revoke_key("never-issued", ADMIN)

    run(scenario)


def test_a_tenant_is_deleted_once_its_keys_are_revoked_and_others_keys_stay(run: Any) -> None:
    async def scenario(admin: TenancyAdmin, keys: RuntimeKeys) -> None:
        for tenant in ("team", "other"):
            await admin.create_tenant(decide.NewTenant(id=tenant), ADMIN)
            await churn(admin, tenant, 3)
        await admin.issue_key(decide.NewKey(tenant="team", id="live"), ADMIN)
        with pytest.raises(Conflict, match=r"still has keys \(live\)"):
            await admin.delete_tenant("team", ADMIN)
        await admin.revoke_key("live", ADMIN)
        assert (await admin.delete_tenant("team", ADMIN))["deleted"] is True
        assert set(keys.snapshot.tenants) == {"other"}
        # the deleted tenant's revoked keys stay listed, their ids still refused
        assert len(await admin.keys("team")) == 4
        await admin.create_tenant(decide.NewTenant(id="team"), ADMIN)
        with pytest.raises(Conflict, match="already used"):
            await admin.issue_key(decide.NewKey(tenant="team", id="live"), ADMIN)

    run(scenario)


def test_a_key_issued_while_its_tenant_is_deleted_stops_the_deletion(run: Any) -> None:
    """The deletion is decided on a snapshot with no live key of the tenant; a key issued
    for it before the deletion is written must stop it (else the key has no tenant).
    Another tenant whose id starts with this one's does not."""

    async def scenario(admin: TenancyAdmin, keys: RuntimeKeys) -> None:
        for tenant in ("team", "team-b"):
            await admin.create_tenant(decide.NewTenant(id=tenant), ADMIN)
        await admin.issue_key(decide.NewKey(tenant="team-b", id="theirs"), ADMIN)
        decided = decide.delete_tenant(await admin.fresh(), Policy(), "team", ADMIN, 0.0)
        await admin.issue_key(decide.NewKey(tenant="team", id="late"), ADMIN)
        applied = await keys.store.apply(decided)
        assert applied.failed is not None and applied.failed.state == "unowned"
        assert set((await admin.fresh()).tenants) == {"team", "team-b"}
        with pytest.raises(Conflict, match=r"still has keys \(late\)"):
            await admin.delete_tenant("team", ADMIN)
        await admin.revoke_key("late", ADMIN)
        # team-b's live key names "team-b", not "team": the deletion goes through
        assert (await admin.delete_tenant("team", ADMIN))["deleted"] is True
        assert set(keys.snapshot.tenants) == {"team-b"}

    run(scenario)


def test_a_store_an_older_gateway_wrote_keeps_working(redis_server: RedisServer) -> None:
    """Revoked records in the keys hash, as a gateway from before the revoked table left
    them: listed as revoked, ids refused, a change of one a 409, not held by a process."""
    sync = redis.Redis.from_url(redis_server.url)
    sync.flushdb()

    async def older_gateway(store: AdminStore) -> None:
        admin = TenancyAdmin(RuntimeKeys(store, lambda s: None), Policy, Outcomes())
        await admin.create_tenant(decide.NewTenant(id="team"), ADMIN)
        await admin.issue_key(decide.NewKey(tenant="team", id="stays"), ADMIN)
        await churn(admin, "team", 5)

    async def scenario() -> None:
        # what an older gateway wrote: its revoked records were in the keys hash
        memory = MemoryAdminStore()
        await older_gateway(memory)
        sync.hset("gw:{admin}:tenants", mapping=(await memory.snapshot()).tenant_json)
        sync.hset(
            "gw:{admin}:keys",
            mapping={**(await memory.snapshot()).key_json, **await memory.revoked()},
        )
        sync.set("gw:{admin}:version", await memory.version())
        client = aioredis.from_url(redis_server.url)
        keys = RuntimeKeys(RedisAdminStore(client), lambda s: None)
        admin = TenancyAdmin(keys, Policy, Outcomes())
        try:
            await keys.start()
            assert set(keys.snapshot.keys) == {"stays"} and keys.snapshot.revoked == 5
            assert len(sync.hkeys("gw:{admin}:keys")) == 1
            statuses = {k["id"]: k["status"] for k in await admin.keys()}
            assert statuses == {
                "stays": "active",
                **{f"team-gone-{i}": "revoked" for i in range(5)},
            }
            with pytest.raises(Conflict, match="already used"):
                await admin.issue_key(decide.NewKey(tenant="team", id="team-gone-2"), ADMIN)
            with pytest.raises(Conflict, match="is revoked"):
                await admin.revoke_key("team-gone-2", ADMIN)
            await admin.revoke_key("stays", ADMIN)
            await admin.delete_tenant("team", ADMIN)
        finally:
            await keys.stop()
            await client.aclose()

    asyncio.run(scenario())
    sync.close()
