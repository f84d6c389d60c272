"""Stored conversations (the Responses API's `store` and `previous_response_id`): per
tenant, every record with a TTL and a size cap, in Redis or in memory behind one
contract (`ConversationStore`)."""

from gateway.state.conversation_store import ConversationStore, RecordLimits
from gateway.state.conversations import STORE_HEADER, Conversations
from gateway.state.factory import open_conversation_store
from gateway.state.memory import MemoryConversationStore
from gateway.state.redis_conversations import RedisConversationStore
from gateway.state.stored_response import StoredResponse, continuation_items

__all__ = [
    "STORE_HEADER",
    "ConversationStore",
    "Conversations",
    "MemoryConversationStore",
    "RecordLimits",
    "RedisConversationStore",
    "StoredResponse",
    "continuation_items",
    "open_conversation_store",
]
