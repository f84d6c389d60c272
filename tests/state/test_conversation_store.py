"""The conversation store contract, against the in-memory store and a real
redis-server: per-tenant records, TTLs, the size cap, deletes, and Redis failures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis

from gateway.errors import StoreUnavailable
from gateway.state import (
    ConversationStore,
    MemoryConversationStore,
    RecordLimits,
    RedisConversationStore,
    StoredResponse,
    continuation_items,
)
from gateway.state.redis_conversations import record_key
from tests.support.redis_server import RedisServer

LIMITS = RecordLimits(ttl_seconds=600, max_record_bytes=4096)
Scenario = Callable[[ConversationStore], Coroutine[Any, Any, Any]]


def record(response_id: str = "resp_1", text: str = "hello") -> StoredResponse:
    return StoredResponse(
        id=response_id,
        created_at=1700000000,
        response={
            "id": response_id,
            "object": "response",
            "output": [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
        },
        input_items=[{"type": "message", "role": "user", "content": "hi"}],
    )


@pytest.fixture(params=["memory", "redis"])
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Scenario], Any]]:
    if request.param == "memory":
        yield lambda scenario: asyncio.run(scenario(MemoryConversationStore(LIMITS)))
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(server.url) as client:
        client.flushdb()

    def on_redis(scenario: Scenario) -> Any:
        async def main() -> Any:
            store = RedisConversationStore.open(server.url, LIMITS, timeout_seconds=2.0)
            try:
                return await scenario(store)
            finally:
                await store.close()

        return asyncio.run(main())

    yield on_redis


def test_a_saved_record_loads_back_whole(run: Callable[[Scenario], Any]) -> None:
    async def scenario(store: ConversationStore) -> None:
        assert await store.save("acme", record())
        assert await store.load("acme", "resp_1") == record()

    run(scenario)


def test_another_tenant_cannot_load_or_delete_a_record(run: Callable[[Scenario], Any]) -> None:
    async def scenario(store: ConversationStore) -> None:
        await store.save("acme", record())
        assert await store.load("globex", "resp_1") is None
        assert not await store.delete("globex", "resp_1")
        assert await store.load("acme", "resp_1") == record()

    run(scenario)


def test_delete_removes_the_record_once(run: Callable[[Scenario], Any]) -> None:
    async def scenario(store: ConversationStore) -> None:
        await store.save("acme", record())
        assert await store.delete("acme", "resp_1")
        assert await store.load("acme", "resp_1") is None
        assert not await store.delete("acme", "resp_1")

    run(scenario)


def test_a_record_over_the_size_cap_is_not_stored(run: Callable[[Scenario], Any]) -> None:
    async def scenario(store: ConversationStore) -> None:
        assert not await store.save("acme", record(text="x" * LIMITS.max_record_bytes))
        assert await store.load("acme", "resp_1") is None

    run(scenario)


def test_a_redis_record_carries_the_ttl_and_a_hash_tag(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        store = RedisConversationStore.open(redis_server.url, LIMITS, timeout_seconds=2.0)
        try:
            await store.save("acme", record("resp_ttl"))
        finally:
            await store.close()

    asyncio.run(scenario())
    key = record_key("gw", "acme", "resp_ttl")
    assert "{resp_ttl}" in key
    with redis.Redis.from_url(redis_server.url) as client:
        ttl = client.ttl(key)
    assert 0 < ttl <= LIMITS.ttl_seconds


def test_memory_records_expire_after_the_ttl_and_the_oldest_go_when_full() -> None:
    now = [0.0]
    store = MemoryConversationStore(LIMITS, max_records=2, clock=lambda: now[0])

    async def scenario() -> None:
        await store.save("acme", record("resp_1"))
        now[0] = LIMITS.ttl_seconds - 1
        assert await store.load("acme", "resp_1") is not None
        now[0] = LIMITS.ttl_seconds
        assert await store.load("acme", "resp_1") is None
        for name in ("resp_a", "resp_b", "resp_c"):
            await store.save("acme", record(name))
        assert await store.load("acme", "resp_a") is None
        assert await store.load("acme", "resp_c") is not None

    asyncio.run(scenario())


def test_redis_down_is_a_store_unavailable_error(fresh_redis: RedisServer) -> None:
    async def scenario() -> None:
        store = RedisConversationStore.open(fresh_redis.url, LIMITS, timeout_seconds=0.5)
        try:
            await store.save("acme", record())
            fresh_redis.stop(kill=True)
            with pytest.raises(StoreUnavailable) as raised:
                await store.load("acme", "resp_1")
            assert raised.value.status == 503
            with pytest.raises(StoreUnavailable):
                await store.save("acme", record())
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_continuation_starts_from_the_inputs_then_the_outputs_as_inputs() -> None:
    stored = record()
    stored.response["output"].insert(0, {"id": "rs_1", "type": "reasoning", "summary": []})
    items = continuation_items(stored)
    assert items == [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": "hello"},
    ]
