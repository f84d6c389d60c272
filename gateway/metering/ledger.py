"""The spend ledger writer: one record per request, off the hot path, never lost, never twice.

`record()` appends to an in-memory queue and returns; a background task writes batches to
Redis, one round trip per batch: one call of a Lua script (`ledger_write.lua`) that, for
each record whose request-id marker is not set yet, sets the marker and adds a stream
entry, then trims the stream (by age and by size, `LedgerRetention`) and adds the batch's
sums to the day and month counters per tenant, key, model and provider. The sums are
added up here, per day and members, and the script takes out what a record found
already written would have added, so a flush retried after a lost reply finds the
markers and counts nothing twice. A batch of 128 keeps each script call
to about a millisecond of Redis time; the command is packed here (`resp.py`).

With a spill directory, every queued record is also in the write-ahead journal there
(`journal.py`) from the moment `record()` returns until its batch is written: a process
killed with records queued leaves them on disk, and its successor (or any process
sharing the directory) replays them, each once.

While Redis is unreachable, records wait in the queue (at most `queue_size`) and the
writer retries with backoff. When the queue is full, new records go to a local JSONL
spill file (see `spill.py`) and are replayed once Redis answers again; without a spill
directory they are dropped and counted in `records_dropped`, which the gateway should
never allow in production (configure a spill directory). `close()` writes what is
queued, and spills what it could not write before its deadline.

Plain counters (`queue_depth`, `records_written`, `write_failures`, ...) are read by the
metrics exporter.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import NoScriptError

from gateway.metering.aggregates import (
    DIMENSIONS,
    METRICS,
    LedgerKeys,
    Period,
    metric_values,
)
from gateway.metering.journal import LedgerJournal
from gateway.metering.ledger_record import LedgerRecord, utc_day
from gateway.metering.memory_ledger import MemoryLedger
from gateway.metering.spill import SpillFiles
from gateway.redis_resp import pack_command

__all__ = ["Ledger", "LedgerRecord", "LedgerRetention", "LedgerWriter", "MemoryLedger"]

log = logging.getLogger(__name__)

WRITE_SCRIPT = resources.files("gateway.metering").joinpath("ledger_write.lua").read_text()
DAY = 86_400


class LedgerWriter(Protocol):
    """What the request pipeline uses: `Ledger` (Redis) and `MemoryLedger` both fit."""

    def record(self, record: LedgerRecord) -> None: ...

    async def start(self) -> None: ...

    async def close(self, grace_seconds: float = 10.0) -> None: ...

    @property
    def queue_depth(self) -> int: ...


# the stream's default bound: about 580 MB of Redis at the ~580 bytes a record an
# hour's soak measured, whatever the traffic (docs/limits-and-budgets.md)
STREAM_MAX_RECORDS = 1_000_000


@dataclass(frozen=True)
class LedgerRetention:
    """How long each part of the ledger lives in Redis."""

    # the stream keeps a record until it is older than stream_seconds or more than
    # about stream_max_records newer ones follow it, whichever comes first: the age bound
    # alone grew Redis by ~580 bytes a request (150 GB a day at 3,000 requests a second).
    # Spend over whole UTC days is read from the day and month counters, which keep
    # every record's sums whatever the stream has let go
    stream_seconds: int = 31 * DAY
    stream_max_records: int = STREAM_MAX_RECORDS
    day_aggregate_seconds: int = 400 * DAY
    month_aggregate_seconds: int = 3 * 366 * DAY
    # a record's "written" marker (a bit per minted id, see aggregates.py): it must
    # outlast any write of the same record again (a flush retried after a lost reply,
    # a dead process's journal or a spill file replayed by its successor); the bits of
    # a bitmap key live this long after the last one set
    written_marker_seconds: int = DAY


class Ledger:
    def __init__(
        self,
        redis: Redis | RedisCluster,
        *,
        keys: LedgerKeys | None = None,
        retention: LedgerRetention | None = None,
        queue_size: int = 10_000,
        batch_size: int = 128,
        flush_interval: float = 0.2,
        max_retry_delay: float = 5.0,
        spill_dir: Path | None = None,
    ) -> None:
        if queue_size < 1 or batch_size < 1:
            raise ValueError("queue_size and batch_size must be positive")
        if retention is not None and (
            retention.stream_seconds < 1 or retention.stream_max_records < 1
        ):
            raise ValueError("the stream's retention (seconds and records) must be positive")
        self._redis = redis
        self.keys = keys or LedgerKeys()
        self.retention = retention or LedgerRetention()
        self._aggregate_key_cache: dict[str, tuple[str, ...]] = {}
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_retry_delay = max_retry_delay
        self._spill = SpillFiles(spill_dir) if spill_dir is not None else None
        self._journal = LedgerJournal(spill_dir) if spill_dir is not None else None
        # each record with its JSON, encoded once for the journal and the stream entry
        self._queue: deque[tuple[LedgerRecord, bytes]] = deque()
        # the writer task waits on this future between batches (at most flush_interval):
        # a future and a loop timer, not wait_for(Event.wait()), which on Python 3.11 asks
        # for the running loop (a getpid system call) twice and builds a task each wait
        self._wakeup: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._sha = hashlib.sha1(WRITE_SCRIPT.encode()).hexdigest()
        self._spill_pending = spill_dir is not None
        self._next_spill_check = 0.0
        # counters for metrics
        self.records_written = 0
        self.duplicates_skipped = 0
        self.write_failures = 0
        self.records_spilled = 0
        self.records_replayed = 0
        self.records_dropped = 0

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def journal_failures(self) -> int:
        return self._journal.write_failures if self._journal is not None else 0

    def record(self, record: LedgerRecord) -> None:
        """Queue a record for writing; with a spill directory it is on disk (journal or
        spill file) when this returns. Never blocks, never touches the network."""
        if len(self._queue) >= self.queue_size:
            self._overflow([record])
            return
        encoded = record.to_json_bytes()
        if self._journal is not None:
            self._journal.append(encoded)
        self._queue.append((record, encoded))
        if len(self._queue) >= self.batch_size:
            self._wake()

    async def start(self) -> None:
        """Start the background writer (idempotent)."""
        if self._task is None or self._task.done():
            self._closing.clear()
            self._task = asyncio.create_task(self._run(), name="ledger-writer")

    async def flush(self) -> None:
        """Write everything queued now; raises if Redis fails (the records stay queued)."""
        while self._queue:
            await self._write_next_batch()

    async def close(self, grace_seconds: float = 10.0) -> None:
        """Write the queue before returning; what cannot be written within `grace_seconds`
        (Redis unreachable) goes to the spill file."""
        self._closing.set()
        self._wake()
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace_seconds)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._queue:
            if self._overflow([record for record, _ in self._queue]):
                self._release(len(self._queue))
            self._queue.clear()
        if self._spill is not None:
            self._spill.close()
        if self._journal is not None:
            self._journal.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()  # once per writer, not per wait
        delay = 0.0
        while True:
            await self._wait_for_work(loop)
            if self._closing.is_set() and not self._queue:
                return
            try:
                await self._write_queued()
                if not self._closing.is_set():
                    await self._replay_spilled()
                delay = 0.0
            except Exception as exc:  # Redis down, or anything else: keep records, retry
                self.write_failures += 1
                delay = min(self.max_retry_delay, max(0.05, delay * 2))
                log.warning(
                    "ledger write failed (%s: %s); %d records queued, retrying in %.2fs",
                    type(exc).__name__,
                    exc,
                    len(self._queue),
                    delay,
                )
                # closing does not cut the backoff short: close() has its own deadline
                await asyncio.sleep(delay)

    async def _write_queued(self) -> None:
        """Write the records queued now, in batches. Records queued meanwhile wait for the
        next wake-up (a full batch, or `flush_interval`): a writer that went on while the
        queue was not empty would, under steady load, write the one or two records that
        came in during each batch's round trip, one script call (and its ~45 fixed Redis
        commands: the stream's trim, the aggregates' sums and TTLs) for each."""
        pending = len(self._queue)
        while pending > 0 and self._queue:
            pending -= await self._write_next_batch()

    async def _wait_for_work(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until a batch is full, close() is called, or flush_interval has passed."""
        if self._closing.is_set() or len(self._queue) >= self.batch_size:
            return
        waiter = self._wakeup = loop.create_future()
        timer = loop.call_later(self.flush_interval, self._wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._wakeup = None

    def _wake(self) -> None:
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _write_next_batch(self) -> int:
        """Write the oldest batch_size queued records; how many it wrote."""
        async with self._write_lock:
            batch = [self._queue[i] for i in range(min(self.batch_size, len(self._queue)))]
            await self._write_batch([record for record, _ in batch], [line for _, line in batch])
            # only now leave the queue: a failed write keeps them for the retry
            for _ in batch:
                self._queue.popleft()
            self._release(len(batch))
            return len(batch)

    async def _write_batch(
        self, records: Sequence[LedgerRecord], encoded: Sequence[bytes] | None = None
    ) -> None:
        """Write records (`encoded`: their JSON, when already made) in one script call."""
        if not records:
            return
        keys, args = self._script_call(records, encoded)
        try:
            written = await self._evalsha(keys, args)
        except NoScriptError:
            # Redis restarted and forgot the script; nothing was written, so run it again
            self._sha = await self._redis.script_load(WRITE_SCRIPT)
            written = await self._evalsha(keys, args)
        self.records_written += int(written)
        self.duplicates_skipped += len(records) - int(written)

    async def _evalsha(self, keys: list[str], args: list[str | bytes]) -> Any:
        """One script call. On a plain client the command is packed here (redis-py's
        packer costs several times the batch's own building) and sent on a connection
        of the client's pool; a cluster client routes (and follows MOVED) itself."""
        redis = self._redis
        if isinstance(redis, RedisCluster):
            return await redis.evalsha(self._sha, len(keys), *keys, *args)
        data = pack_command(("EVALSHA", self._sha, str(len(keys)), *keys, *args))
        pool = redis.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            # a failed read disconnects, so the next batch never reads this reply
            await connection.send_packed_command(data)
            return await connection.read_response()
        finally:
            await pool.release(connection)

    def _script_call(
        self, records: Sequence[LedgerRecord], encoded: Sequence[bytes] | None = None
    ) -> tuple[list[str], list[str | bytes]]:
        """KEYS and ARGV for `ledger_write.lua` (its header documents the layout): the
        batch's records grouped by day and members, each group's sums added up here."""
        retention = self.retention
        min_id = f"{int((time.time() - retention.stream_seconds) * 1000)}-0"
        markers = [self.keys.written_marker(record) for record in records]
        keys = [self.keys.stream]
        for record, (marker, _) in zip(records, markers, strict=True):
            # and the record's own key, which a gateway from before the bitmaps set
            keys += (marker, self.keys.seen(record.once_key))
        key_index: dict[str, str] = {}
        # day and members -> the group's number and its records' metric values
        groups: dict[tuple[str, str, str, str, str], tuple[str, list[tuple[int, ...]]]] = {}
        group_args: list[str] = []
        record_args: list[str | bytes] = []
        if encoded is None:
            encoded = [record.to_json_bytes() for record in records]
        for record, json, (_, bit) in zip(records, encoded, markers, strict=True):
            day = utc_day(record.time)
            values = metric_values(record)
            members = (day, record.tenant, record.key_id, record.model, record.provider)
            group = groups.get(members)
            if group is None:
                for key in self._aggregate_keys(day):
                    index = key_index.get(key)
                    if index is None:
                        keys.append(key)
                        index = key_index[key] = str(len(keys))  # Lua counts from 1
                    group_args.append(index)
                group_args += members[1:]
                group = groups[members] = (str(len(groups) + 1), [])
            group[1].append(values)
            record_args += (json, str(bit), " ".join((group[0], *map(str, values))))
        args: list[str | bytes] = [
            str(len(records)),
            str(retention.written_marker_seconds),
            min_id,
            str(retention.stream_max_records),
            str(retention.day_aggregate_seconds),
            str(retention.month_aggregate_seconds),
            str(len(DIMENSIONS)),
            str(len(METRICS)),
            *METRICS,
            str(len(groups)),
        ]
        stride = 3 * len(DIMENSIONS)
        for number, (_, rows) in enumerate(groups.values()):
            args += group_args[number * stride : (number + 1) * stride]
            args += [str(sum(column)) for column in zip(*rows, strict=True)]
        args += record_args
        return keys, args

    def _aggregate_keys(self, day: str) -> tuple[str, ...]:
        """The day and month counter keys of a UTC day, one per dimension: the same for
        every record of the day, so built once a day rather than per record."""
        cached = self._aggregate_key_cache.get(day)
        if cached is None:
            periods: tuple[tuple[Period, str], ...] = (("day", day), ("month", day[:7]))
            cached = tuple(
                self.keys.aggregate(period, label, dimension)
                for period, label in periods
                for dimension in DIMENSIONS
            )
            if len(self._aggregate_key_cache) > 8:
                self._aggregate_key_cache.clear()
            self._aggregate_key_cache[day] = cached
        return cached

    async def _replay_spilled(self) -> None:
        """Write one spill file back, when Redis answers and the queue is empty."""
        if self._spill is None or self._queue:
            return
        now = time.monotonic()
        if not self._spill_pending and now < self._next_spill_check:
            return
        self._next_spill_check = now + 60.0  # files left by a crashed process
        # claiming renames one file and rotates our own: quick, and kept on the loop's
        # thread so that record() never spills into a file being claimed
        claimed = self._spill.claim()
        if claimed is None:
            self._spill_pending = False
            return
        try:
            records = await asyncio.to_thread(SpillFiles.read, claimed.path)
            for start in range(0, len(records), self.batch_size):
                await self._write_batch(records[start : start + self.batch_size])
            await asyncio.to_thread(claimed.path.unlink)
        finally:
            # a failed replay leaves the file, claimable again once unlocked
            claimed.release()
        self.records_replayed += len(records)
        self._spill_pending = True  # there may be more files

    def _release(self, count: int) -> None:
        if self._journal is not None:
            self._journal.release(count)

    def _overflow(self, records: list[LedgerRecord]) -> bool:
        """Spill records that cannot wait in memory; False when they are dropped (from
        memory: the journal still holds those it had)."""
        if self._spill is not None:
            try:
                self.records_spilled += self._spill.append(records)
                self._spill_pending = True
                return True
            except OSError as exc:
                log.error("ledger spill file cannot be written: %s", exc.strerror)
        self.records_dropped += len(records)
        log.error("ledger queue full and no spill file: %d records dropped", len(records))
        return False
