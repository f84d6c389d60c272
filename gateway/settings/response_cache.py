"""The response cache's settings: where it is switched on (a route's or a key's `cache:`
block in a policy file) and how big the in-memory store may grow (`response_cache:` in
the server config). See docs/response-cache.md."""

from __future__ import annotations

from pydantic import Field

from gateway.settings.base import Strict


class CacheSettings(Strict):
    """A route's or a key's `cache:` block. A key's block wins over its route's, so a key
    can opt in on any route, or out (`enabled: false`) of a route that caches."""

    enabled: bool = True
    ttl_seconds: int = Field(3600, ge=1)
    # an answer larger than this (encoded, as stored) is served but not cached
    max_entry_bytes: int = Field(256 * 1024, ge=1024)


class ResponseCacheStoreSettings(Strict):
    """Where cached answers live: Redis when `store.kind` is redis (every entry with its
    TTL; the total is bounded by Redis `maxmemory`), else one process's memory."""

    # the in-memory store's byte budget: least recently used entries go first past it
    memory_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    # a lookup slower than this is a miss: the cache must never make a request slower
    # than asking the upstream would
    timeout_ms: int = Field(100, ge=1)
