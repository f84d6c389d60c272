"""The admin store in the Redis the gateway already uses: four hashes (tenants, live keys,
key hashes, revoked keys), a version counter and an audit stream, all under one hash tag so
that one Lua script changes them together on a Redis Cluster too.

    gw:{admin}:tenants        hash  tenant id -> record JSON
    gw:{admin}:keys           hash  live key id -> record JSON
    gw:{admin}:hashes         hash  sha256:<hex> -> key id (no two keys share a hash)
    gw:{admin}:revoked        hash  revoked key id -> record JSON (kept: ids are never reused)
    gw:{admin}:version        int   +1 per change; replicas poll it
    gw:{admin}:audit          stream, trimmed to about AUDIT_ENTRIES entries
    gw:{admin}:session:<h>    console session, with its TTL

The records are bounded by what admins create; everything else has a TTL or a cap. A
snapshot (what every process reads when the version moves) reads tenants and live keys
only, and counts the revoked ones; the admin API reads revoked records when it lists them
or needs one.

A store written by a gateway from before the revoked table holds revoked records in
gw:{admin}:keys. A snapshot leaves them out of the process's copy, and when it met any it
moves them all to gw:{admin}:revoked (move_misplaced.lua, verbatim, no version bump: no
process holds them), so an upgraded deployment reads only live keys from its first change
on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import RedisError

from gateway.admin.admin_store import AUDIT_ENTRIES
from gateway.admin.change import Applied, AuditEntry, Change
from gateway.admin.records import AdminSnapshot
from gateway.errors import StoreUnavailable

_APPLY = resources.files("gateway.admin").joinpath("apply.lua").read_text()
_MOVE_MISPLACED = resources.files("gateway.admin").joinpath("move_misplaced.lua").read_text()
# KEYS: tenants, keys, hashes, revoked, version: the version, tenants, live keys, and how
# many keys are revoked
_SNAPSHOT = """
return {redis.call('GET', KEYS[5]) or '0', redis.call('HGETALL', KEYS[1]),
        redis.call('HGETALL', KEYS[2]), redis.call('HLEN', KEYS[4])}
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


class RedisAdminStore:
    def __init__(self, client: Any, key_prefix: str = "gw", audit_entries: int = AUDIT_ENTRIES):
        self._client = client
        base = f"{key_prefix}:{{admin}}"
        self._session_prefix = f"{base}:session:"
        self._key = {
            name: f"{base}:{name}"
            for name in ("tenants", "keys", "hashes", "revoked", "version", "audit")
        }
        # apply.lua's KEYS, in this order (the snapshot script's are the first five)
        self._keys = list(self._key.values())
        self._audit_entries = audit_entries

    async def version(self) -> int:
        try:
            raw = await self._client.get(self._key["version"])
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return int(raw or 0)

    async def snapshot(self, previous: AdminSnapshot | None = None) -> AdminSnapshot:
        try:
            version, tenants, keys, revoked = await self._client.eval(_SNAPSHOT, 5, *self._keys[:5])
            snapshot = AdminSnapshot.decode(
                int(version), _pairs(tenants), _pairs(keys), previous, int(revoked)
            )
            if snapshot.misplaced:
                await self._client.eval(_MOVE_MISPLACED, 2, self._key["keys"], self._key["revoked"])
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return snapshot

    async def revoked(self, ids: Sequence[str] | None = None) -> dict[str, str]:
        try:
            if ids is None:
                stored = await self._client.hgetall(self._key["revoked"])
                return {_text(i): _text(raw) for i, raw in stored.items()}
            if not ids:
                return {}
            found = await self._client.hmget(self._key["revoked"], list(ids))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return {i: _text(raw) for i, raw in zip(ids, found, strict=True) if raw is not None}

    async def apply(self, change: Change) -> Applied:
        audit = [part for name, value in change.audit.items() for part in (name, value)]
        payload = {
            "expect": [[e.table, e.field, e.state, e.value] for e in change.expect],
            "write": [list(w) for w in change.write],
            "delete": [list(d) for d in change.delete],
            "audit": audit,
            "audit_max": self._audit_entries,
        }
        # cjson turns an empty list into an empty object; both iterate as nothing
        try:
            failed, version = await self._client.eval(_APPLY, 6, *self._keys, json.dumps(payload))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        if int(failed):
            return Applied(failed=change.expect[int(failed) - 1])
        return Applied(version=int(version))

    async def audit(self, limit: int) -> list[AuditEntry]:
        try:
            rows = await self._client.xrevrange(self._key["audit"], count=limit)
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None
        return [
            AuditEntry(_text(entry_id), {_text(k): _text(v) for k, v in fields.items()})
            for entry_id, fields in rows
        ]

    async def open_session(self, token_hash: str, ttl_seconds: int) -> None:
        try:
            await self._client.set(self._session_prefix + token_hash, "1", ex=ttl_seconds)
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None

    async def session_alive(self, token_hash: str) -> bool:
        try:
            return bool(await self._client.exists(self._session_prefix + token_hash))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None

    async def end_session(self, token_hash: str) -> None:
        try:
            await self._client.delete(self._session_prefix + token_hash)
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from None


def _unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"The admin store (Redis) did not answer ({type(exc).__name__}); "
        "runtime tenants and keys cannot be read or changed until it does.",
        code="admin_store_unavailable",
    )
