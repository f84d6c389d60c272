"""Versioned scorer weights in Redis: what `gateway route retrain` promotes and
`gateway route rollback` restores, and what every replica serving a route with
`learned.scorer: redis:ROUTE` reads, so the whole fleet serves one version.

Keys, one hash tag per route (a Redis Cluster keeps a route's keys on one slot):

    gw:{scorer:ROUTE}:weights     hash  version -> the weights file's bytes (KEEP newest)
    gw:{scorer:ROUTE}:meta        hash  version -> JSON (evidence, labels, when, by whom)
    gw:{scorer:ROUTE}:next        counter: the last version number handed out
    gw:{scorer:ROUTE}:current     the version replicas serve (absent: none promoted)
    gw:{scorer:ROUTE}:promotions  list, newest first: versions promoted, PROMOTIONS long

Bounded: publishing drops versions older than the KEEP newest unless current or in the
promotion list. Promotion and rollback are one Lua script each (checked and switched at
once); the audit entry goes to the admin audit stream (gateway/admin) after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

KEEP = 10
PROMOTIONS = 20

# KEYS: weights, meta, current, promotions; ARGV: version, PROMOTIONS
# -> the previous current version ('' if none), or false: no such version
_PROMOTE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return false end
local previous = redis.call('GET', KEYS[3]) or ''
redis.call('SET', KEYS[3], ARGV[1])
redis.call('LPUSH', KEYS[4], ARGV[1])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[2]) - 1)
return previous
"""

# KEYS: weights, meta, next, current, promotions; ARGV: weights, meta, KEEP
_PUBLISH = """
local version = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], version, ARGV[1])
redis.call('HSET', KEYS[2], version, ARGV[2])
local keep = {}
keep[redis.call('GET', KEYS[4]) or ''] = true
for _, v in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do keep[v] = true end
for _, v in ipairs(redis.call('HKEYS', KEYS[1])) do
  if tonumber(v) <= version - tonumber(ARGV[3]) and not keep[v] then
    redis.call('HDEL', KEYS[1], v)
    redis.call('HDEL', KEYS[2], v)
  end
end
return version
"""


class VersionError(ValueError):
    """A version that does not exist, or nothing to roll back to; says which."""


@dataclass(frozen=True)
class StoredVersion:
    version: int
    meta: dict[str, Any]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ScorerVersions:
    """One route's versioned weights (`client`: a redis.asyncio client)."""

    def __init__(self, client: Any, route: str, key_prefix: str = "gw") -> None:
        self._client = client
        self.route = route
        base = f"{key_prefix}:{{scorer:{route}}}"
        self._weights = f"{base}:weights"
        self._meta = f"{base}:meta"
        self._next = f"{base}:next"
        self._current = f"{base}:current"
        self._promotions = f"{base}:promotions"

    async def publish(self, weights: bytes, meta: dict[str, Any]) -> int:
        """Store a candidate (not yet served); its version number."""
        keys = [self._weights, self._meta, self._next, self._current, self._promotions]
        encoded = json.dumps(meta, sort_keys=True, default=str)
        return int(await self._client.eval(_PUBLISH, 5, *keys, weights, encoded, KEEP))

    async def promote(self, version: int) -> int | None:
        """Serve `version` from now on; the version served before (None: none)."""
        keys = [self._weights, self._meta, self._current, self._promotions]
        previous = await self._client.eval(_PROMOTE, 4, *keys, str(version), PROMOTIONS)
        if previous is None:
            raise VersionError(f"route {self.route} has no stored version {version}")
        text = _text(previous)
        return int(text) if text else None

    async def rollback_target(self) -> int:
        """The version promoted before the current one."""
        current = await self.current()
        for raw in await self._client.lrange(self._promotions, 0, -1):
            version = int(_text(raw))
            if version != current:
                return version
        raise VersionError(f"route {self.route} has no earlier promoted version to roll back to")

    async def current(self) -> int | None:
        raw = await self._client.get(self._current)
        return int(_text(raw)) if raw is not None else None

    async def weights(self, version: int) -> bytes | None:
        raw = await self._client.hget(self._weights, str(version))
        return raw if raw is None or isinstance(raw, bytes) else str(raw).encode()

    async def history(self) -> list[StoredVersion]:
        """Every stored version, newest first."""
        raw = await self._client.hgetall(self._meta)
        rows = [StoredVersion(int(_text(k)), json.loads(_text(v))) for k, v in raw.items()]
        return sorted(rows, key=lambda row: -row.version)
