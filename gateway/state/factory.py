"""The conversation store a process uses: Redis when the server's store is Redis (one
conversation seen by every replica), in memory otherwise."""

from __future__ import annotations

from gateway.settings.server import ConversationSettings, StoreSettings
from gateway.state.conversation_store import ConversationStore, RecordLimits
from gateway.state.memory import MemoryConversationStore
from gateway.state.redis_conversations import RedisConversationStore


def open_conversation_store(
    store: StoreSettings, conversations: ConversationSettings
) -> ConversationStore:
    limits = RecordLimits(
        ttl_seconds=conversations.ttl_seconds, max_record_bytes=conversations.max_record_bytes
    )
    if store.kind == "redis" and store.redis_url is not None:
        return RedisConversationStore.open(
            store.redis_url.get_secret_value(),
            limits,
            key_prefix=store.key_prefix,
            # a conversation read is one GET: the limit store's budget, with room to spare
            timeout_seconds=max(0.5, store.timeout_ms / 1000 * 4),
        )
    return MemoryConversationStore(limits, max_records=conversations.memory_max_records)
