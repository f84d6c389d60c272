"""The Responses rules over the store: 404 for unknown or foreign ids, a 503 only when
a continuation needs the store, a skipped save said in the header value."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import NotFound, StoreUnavailable
from gateway.state import (
    Conversations,
    MemoryConversationStore,
    RecordLimits,
    RedisConversationStore,
)
from tests.support.redis_server import RedisServer

LIMITS = RecordLimits(ttl_seconds=60, max_record_bytes=2048)
RESPONSE = {"id": "resp_1", "created_at": 1, "output": []}
INPUT = [{"type": "message", "role": "user", "content": "hi"}]


def test_a_kept_response_continues_for_its_tenant_only() -> None:
    conversations = Conversations(MemoryConversationStore(LIMITS))

    async def scenario() -> None:
        assert await conversations.keep("acme", RESPONSE, INPUT) == "stored"
        assert await conversations.history("acme", "resp_1") == INPUT
        with pytest.raises(NotFound) as raised:
            await conversations.history("globex", "resp_1")
        assert raised.value.status == 404 and raised.value.param == "previous_response_id"
        with pytest.raises(NotFound):
            await conversations.delete("globex", "resp_1")
        await conversations.delete("acme", "resp_1")
        with pytest.raises(NotFound):
            await conversations.record("acme", "resp_1")

    asyncio.run(scenario())


def test_an_oversized_response_is_skipped_and_said_so() -> None:
    conversations = Conversations(MemoryConversationStore(LIMITS))
    big = [{"type": "message", "role": "user", "content": "x" * 4096}]
    outcome = asyncio.run(conversations.keep("acme", RESPONSE, big))
    assert outcome == "skipped; over max_record_bytes"


def test_redis_down_skips_saves_and_fails_continuations(fresh_redis: RedisServer) -> None:
    async def scenario() -> None:
        store = RedisConversationStore.open(fresh_redis.url, LIMITS, timeout_seconds=0.5)
        conversations = Conversations(store)
        try:
            fresh_redis.stop(kill=True)
            assert await conversations.keep("acme", RESPONSE, INPUT) == "skipped; store unavailable"
            with pytest.raises(StoreUnavailable):
                await conversations.history("acme", "resp_1")
        finally:
            await store.close()

    asyncio.run(scenario())
