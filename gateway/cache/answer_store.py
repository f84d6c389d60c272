"""The response cache's stores, one contract (tests/state/test_answer_cache.py proves
both keep it): `get` an entry by key, `put` one with its TTL. Keys are made by the
pipeline (tenant and digest); a store never interprets them.

Failures: a Redis error or a reply slower than the lookup budget raises
`CacheUnavailable` (the pipeline serves a miss and counts it), and Redis is left alone
for `retry_after_seconds` after one, so a dead Redis costs each request a clock read
rather than a timeout."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from redis.exceptions import RedisError

log = logging.getLogger("gateway.cache")


class CacheUnavailable(Exception):
    """The cache's store could not answer in time; the request goes on without it."""


class AnswerCacheStore(Protocol):
    async def get(self, key: str) -> bytes | None:
        """The entry, None when there is none (or it expired); CacheUnavailable."""
        ...

    async def put(self, key: str, data: bytes, ttl_seconds: int) -> bool:
        """True when stored (False: over the store's own size bound); CacheUnavailable."""
        ...

    async def close(self) -> None: ...


class MemoryAnswerCache:
    """One process's cache: an LRU under a byte budget, each entry with its TTL."""

    def __init__(self, max_bytes: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_bytes = max_bytes
        self._clock = clock
        self._bytes = 0
        # key -> (expires at, data), least recently used first
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def get(self, key: str) -> bytes | None:
        found = self._entries.get(key)
        if found is None:
            return None
        expires, data = found
        if expires <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return data

    async def put(self, key: str, data: bytes, ttl_seconds: int) -> bool:
        if len(data) > self._max_bytes:
            return False
        self._drop(key)
        self._entries[key] = (self._clock() + ttl_seconds, data)
        self._bytes += len(data)
        while self._bytes > self._max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._bytes -= len(evicted)
        return True

    def _drop(self, key: str) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self._bytes -= len(found[1])

    async def close(self) -> None:
        self._entries.clear()
        self._bytes = 0


class RedisAnswerCache:
    """One string key per entry, written with its TTL in the same command. The total
    size is left to Redis: every entry expires, and under `maxmemory` with an LRU or
    `volatile-*` eviction policy Redis drops cached answers before it refuses writes."""

    def __init__(
        self,
        client: Any,
        *,
        timeout_seconds: float,
        retry_after_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._timeout = timeout_seconds
        self._retry_after = retry_after_seconds
        self._clock = clock
        self._down_until = 0.0

    async def get(self, key: str) -> bytes | None:
        self._check_up()
        try:
            async with asyncio.timeout(self._timeout):
                data: bytes | None = await self._client.get(key)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed("read", exc) from None
        self._down_until = 0.0
        return data

    async def put(self, key: str, data: bytes, ttl_seconds: int) -> bool:
        self._check_up()
        try:
            # a write is off the client's path (its answer has gone out): more time
            async with asyncio.timeout(self._timeout * 4):
                await self._client.set(key, data, ex=ttl_seconds)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed("write", exc) from None
        self._down_until = 0.0
        return True

    def _check_up(self) -> None:
        if self._down_until and self._clock() < self._down_until:
            raise CacheUnavailable("Redis failed moments ago; not asked again yet")

    def _failed(self, what: str, exc: BaseException) -> CacheUnavailable:
        self._down_until = self._clock() + self._retry_after
        log.warning("response cache %s failed (%s): served as a miss", what, type(exc).__name__)
        return CacheUnavailable(f"Redis {what} failed: {type(exc).__name__}")

    async def close(self) -> None:
        await self._client.aclose()
