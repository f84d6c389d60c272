"""The labels store on Redis: shared by every replica, kept across restarts.

    {P}{eval}:label:TENANT:REQUEST:METRIC   "1", a label's once-marker (TTL)
    {P}{eval}:labels                        a Stream of labels, trimmed to max_labels (TTL
                                            renewed by each write)
    {P}{eval}:req:TENANT:REQUEST            a request note (TTL)
    {P}{eval}:spend:TENANT:DAY              evaluation spend and reservations, integer
                                            nano-dollars (2 days)
    {P}{eval}:jobs                          the job journal (journal.py)

Every key shares the `{eval}` hash tag, so the write script's keys sit in one Redis
Cluster slot. A label is written by one script: the marker SET NX, and only when it was
set, the stream entry: a label is stored once whoever writes it, however often."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gateway.evaluation.labels import Label, RequestNote, decode_label, decode_note, encode

SPEND_TTL_SECONDS = 2 * 86_400
NANOS = Decimal(1_000_000_000)

_ADD_ONCE = """
if redis.call('SET', KEYS[1], '1', 'EX', ARGV[1], 'NX') then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'label', ARGV[3])
  redis.call('EXPIRE', KEYS[2], ARGV[1])
  return 1
end
return 0
"""

# spend plus a reservation, only when the total stays within the cap
_RESERVE = """
local total = tonumber(redis.call('GET', KEYS[1]) or '0')
if total + tonumber(ARGV[1]) > tonumber(ARGV[2]) then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


def note_key(base: str, tenant: str, request_id: str) -> str:
    """A request note's key under `base` (`{P}{eval}:`)."""
    return f"{base}req:{tenant}:{request_id}"


class RedisLabelStore:
    def __init__(self, client: Any, key_prefix: str, *, ttl_seconds: int, max_labels: int) -> None:
        self._client = client
        self._base = f"{key_prefix}{{eval}}:"
        self._ttl = ttl_seconds
        self._max = max_labels
        self._add_once = client.register_script(_ADD_ONCE)
        self._reserve = client.register_script(_RESERVE)

    def _marker(self, tenant: str, request_id: str, metric: str) -> str:
        return f"{self._base}label:{tenant}:{request_id}:{metric}"

    async def add(self, label: Label) -> bool:
        keys = [self._marker(label.tenant, label.request_id, label.metric), self._base + "labels"]
        written = await self._add_once(keys=keys, args=[self._ttl, self._max, encode(label)])
        return bool(written)

    async def has(self, tenant: str, request_id: str, metric: str) -> bool:
        return bool(await self._client.exists(self._marker(tenant, request_id, metric)))

    async def recent(self, limit: int) -> list[Label]:
        entries = await self._client.xrevrange(self._base + "labels", count=limit)
        labels = []
        for _, fields in entries:
            raw = fields.get(b"label") or fields.get("label")
            if raw is not None:
                labels.append(decode_label(raw))
        return labels

    async def note(self, notes: list[RequestNote]) -> None:
        if not notes:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for note in notes:
                pipe.set(
                    note_key(self._base, note.tenant, note.request_id), encode(note), ex=self._ttl
                )
            await pipe.execute()

    async def request_note(self, tenant: str, request_id: str) -> RequestNote | None:
        raw = await self._client.get(note_key(self._base, tenant, request_id))
        return None if raw is None else decode_note(raw)

    async def add_spend(self, tenant: str, day: str, usd: Decimal) -> Decimal:
        key = f"{self._base}spend:{tenant}:{day}"
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.incrby(key, int(usd * NANOS))
            pipe.expire(key, SPEND_TTL_SECONDS)
            total, _ = await pipe.execute()
        return Decimal(int(total)) / NANOS

    async def reserve_spend(self, tenant: str, day: str, usd: Decimal, cap_usd: Decimal) -> bool:
        key = f"{self._base}spend:{tenant}:{day}"
        args = [int(usd * NANOS), int(cap_usd * NANOS), SPEND_TTL_SECONDS]
        return bool(await self._reserve(keys=[key], args=args))

    async def spend(self, tenant: str, day: str) -> Decimal:
        raw = await self._client.get(f"{self._base}spend:{tenant}:{day}")
        return Decimal(int(raw)) / NANOS if raw is not None else Decimal(0)

    async def close(self) -> None:
        return None  # the client is the process's (pipeline/stores.py closes it)
