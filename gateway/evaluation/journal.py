"""The evaluation job journal on Redis: a sampled job is recorded before it is queued in
memory, acknowledged when it is finished (labelled, or given up with a counted reason),
and claimed by another worker when the one holding it stopped without finishing it (a
kill -9, a lost host).

    {P}{eval}:jobs    a Stream of jobs (trimmed to max_jobs, TTL renewed by each write)
                      with one consumer group, `evaluators`; each process is a consumer

Recording is one script, one round trip: XADD, then XREADGROUP delivers the new entry to
this process at once (it is in the group's pending list, owned by this consumer), and,
for feedback, the request's note is SET beside it. A finished job is XACKed and XDELed.
While a process holds a job (queued or running) it renews the job's lease with
XCLAIM ... JUSTID; a job whose lease ran out (idle longer than `lease_seconds`) is
claimed with XAUTOCLAIM by whichever process looks next, and each claim counts a
delivery: past `max_attempts` deliveries the job is given up (acknowledged and counted),
so a job that kills its worker every time stops being retried.

Every key shares the `{eval}` hash tag with the labels (one Redis Cluster slot). The
label's once-marker (redis_store.py) keeps a job that is run twice labelled once.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.evaluation.redis_store import note_key

GROUP = "evaluators"
# the journal key lives this long after its last write (jobs are seconds old when done)
JOURNAL_TTL_SECONDS = 86_400
# a consumer with nothing pending and idle this long is removed from the group
IDLE_CONSUMER_MS = 3_600_000

_RECORD = """
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '$', 'MKSTREAM')
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'job', ARGV[5])
-- every write delivers at once, so nothing older is undelivered: this reads the new entry
redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 100, 'STREAMS', KEYS[1], '>')
redis.call('EXPIRE', KEYS[1], ARGV[4])
if KEYS[2] then
  redis.call('SET', KEYS[2], ARGV[7], 'EX', ARGV[6])
end
return id
"""

_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {{}, 0, 0}
end
local ok, claimed = pcall(redis.call, 'XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3],
  '0-0', 'COUNT', ARGV[4])
if not ok then
  return {{}, 0, 0}
end
local jobs, given_up = {}, 0
-- Redis 7 lists entries trimmed away (and drops them from the pending list) apart
local trimmed = claimed[3] and #claimed[3] or 0
for _, entry in ipairs(claimed[2]) do
  if not entry or not entry[2] then
    trimmed = trimmed + 1
  else
    local id = entry[1]
    local pending = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
    local deliveries = pending[1] and pending[1][4] or 0
    if deliveries > tonumber(ARGV[5]) then
      redis.call('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
      given_up = given_up + 1
    else
      table.insert(jobs, {id, entry[2][2], deliveries})
    end
  end
end
return {jobs, given_up, trimmed}
"""


@dataclass(frozen=True)
class ClaimedJob:
    entry_id: str
    job: bytes
    # how many times it has been handed to a worker, this one included
    deliveries: int


@dataclass(frozen=True)
class Claimed:
    jobs: list[ClaimedJob] = field(default_factory=list)
    # past max_attempts: acknowledged without running (counted `attempts`)
    given_up: int = 0
    # trimmed from the journal (max_jobs) before anyone finished them (counted)
    trimmed: int = 0


class JobJournal(Protocol):
    @property
    def lease_seconds(self) -> float:
        """How long a job's holder may go without renewing it before others claim it."""
        ...

    async def record(self, job: bytes, note: tuple[str, str, bytes] | None) -> str:
        """Record `job` (and the request's note, (tenant, request id, encoded), when
        given) held by this process; its entry id."""
        ...

    async def finish(self, entry_id: str) -> None: ...

    async def keep(self, entry_ids: list[str]) -> None:
        """Renew the lease of the jobs this process holds."""
        ...

    async def claim(self, count: int) -> Claimed:
        """At most `count` jobs whose lease ran out, now held by this process."""
        ...

    async def release(self, entry_ids: list[str]) -> None:
        """End the lease of jobs this process will not finish (it is stopping): the
        next claim by any process takes them."""
        ...

    async def forget_idle_consumers(self) -> int:
        """Remove stopped processes from the journal's books; how many."""
        ...


def consumer_name() -> str:
    """This process among the group's consumers (unique: a restart is a new one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RedisJobJournal:
    def __init__(
        self,
        client: Any,
        key_prefix: str,
        *,
        lease_seconds: float,
        max_attempts: int,
        max_jobs: int,
        note_ttl_seconds: int,
        consumer: str | None = None,
    ) -> None:
        self._client = client
        self._base = f"{key_prefix}{{eval}}:"
        self.key = self._base + "jobs"
        self.consumer = consumer or consumer_name()
        self.lease_ms = max(1, int(lease_seconds * 1000))
        self._max_attempts = max_attempts
        self._max_jobs = max_jobs
        self._note_ttl = note_ttl_seconds
        self._record = client.register_script(_RECORD)
        self._claim = client.register_script(_CLAIM)

    @property
    def lease_seconds(self) -> float:
        return self.lease_ms / 1000

    async def record(self, job: bytes, note: tuple[str, str, bytes] | None) -> str:
        keys = [self.key]
        args: list[Any] = [GROUP, self.consumer, self._max_jobs, JOURNAL_TTL_SECONDS, job]
        if note is not None:
            tenant, request_id, encoded = note
            keys.append(note_key(self._base, tenant, request_id))
            args += [self._note_ttl, encoded]
        entry_id = await self._record(keys=keys, args=args)
        return _text(entry_id)

    async def finish(self, entry_id: str) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xack(self.key, GROUP, entry_id)
            pipe.xdel(self.key, entry_id)
            await pipe.execute()

    async def keep(self, entry_ids: list[str]) -> None:
        if entry_ids:
            await self._client.xclaim(self.key, GROUP, self.consumer, 0, entry_ids, justid=True)

    async def release(self, entry_ids: list[str]) -> None:
        if entry_ids:
            await self._client.xclaim(
                self.key, GROUP, self.consumer, 0, entry_ids, idle=self.lease_ms, justid=True
            )

    async def claim(self, count: int) -> Claimed:
        if count <= 0:
            return Claimed()
        jobs, given_up, trimmed = await self._claim(
            keys=[self.key],
            args=[GROUP, self.consumer, self.lease_ms, count, self._max_attempts],
        )
        return Claimed(
            [ClaimedJob(_text(i), _bytes(job), int(n)) for i, job, n in jobs],
            int(given_up),
            int(trimmed),
        )

    async def forget_idle_consumers(self) -> int:
        """Remove consumers of stopped processes (nothing pending, long idle)."""
        try:
            consumers = await self._client.xinfo_consumers(self.key, GROUP)
        except Exception:
            return 0  # no journal yet
        removed = 0
        for consumer in consumers:
            name = _text(consumer.get("name", ""))
            if name == self.consumer or int(consumer.get("pending", 0)):
                continue
            if int(consumer.get("idle", 0)) >= IDLE_CONSUMER_MS:
                await self._client.xgroup_delconsumer(self.key, GROUP, name)
                removed += 1
        return removed


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
