"""The Redis conversation store: one string key per (tenant, response), written with its
TTL in the same command. The response id is the key's hash tag, so a Redis Cluster
spreads one tenant's conversations over its shards; the tenant is part of the key, so
another tenant's id is simply not there (a 404, never a 403 that confirms it exists)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.errors import StoreUnavailable
from gateway.state.conversation_store import RecordLimits
from gateway.state.stored_response import StoredResponse, decode_record, encode_record


def record_key(prefix: str, tenant: str, response_id: str) -> str:
    return f"{prefix}:resp:{{{response_id}}}:{tenant}"


class RedisConversationStore:
    def __init__(self, client: Any, limits: RecordLimits, *, key_prefix: str = "gw") -> None:
        self.limits = limits
        self._client = client
        self._prefix = key_prefix

    @classmethod
    def open(
        cls, url: str, limits: RecordLimits, *, key_prefix: str = "gw", timeout_seconds: float
    ) -> RedisConversationStore:
        client = aioredis.from_url(
            url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds
        )
        return cls(client, limits, key_prefix=key_prefix)

    async def save(self, tenant: str, record: StoredResponse) -> bool:
        data = encode_record(record)
        if len(data) > self.limits.max_record_bytes:
            return False
        key = record_key(self._prefix, tenant, record.id)
        try:
            await self._client.set(key, data, ex=self.limits.ttl_seconds)
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return True

    async def load(self, tenant: str, response_id: str) -> StoredResponse | None:
        try:
            data = await self._client.get(record_key(self._prefix, tenant, response_id))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return None if data is None else decode_record(data)

    async def delete(self, tenant: str, response_id: str) -> bool:
        try:
            deleted = await self._client.delete(record_key(self._prefix, tenant, response_id))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return bool(deleted)

    async def close(self) -> None:
        await self._client.aclose()


def _unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        "The gateway's conversation store (Redis) is unreachable "
        f"({type(exc).__name__}); stored responses cannot be read or written right now. "
        "Retry shortly, or send the whole conversation as `input` without "
        "previous_response_id.",
        code="conversation_store_unavailable",
    )
