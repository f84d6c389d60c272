"""Each process's copy of the runtime tenants and keys, kept current without a Redis round
trip per request.

Authentication reads the copy (a dict lookup, like YAML keys). The copy follows the store
two ways:
- a poll of the store's version counter every `poll_seconds` (one GET); when it moved,
  one script reads the tenants and live keys at that version and the view is rebuilt
  (revoked keys are only counted: their records stay in the store). A revoked key
  is refused by every process within one poll and one read.
- a key this process does not know: before answering 401, one version check (shared by
  every such request in flight, at most one per `MISS_SPACING_SECONDS`) picks up a key
  issued on another replica a moment ago, so it works everywhere at once.

When the store does not answer, the last copy keeps serving (a key revoked meanwhile is
still accepted until it answers again) and `gateway_runtime_keys_sync_age_seconds` grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from gateway.admin.admin_store import AdminStore
from gateway.admin.records import AdminSnapshot
from gateway.errors import StoreUnavailable

log = logging.getLogger("gateway.admin")

# a flood of unknown keys costs the store at most this many version reads per second
MISS_SPACING_SECONDS = 0.05


class RuntimeKeys:
    def __init__(
        self,
        store: AdminStore,
        on_change: Callable[[AdminSnapshot], None],
        poll_seconds: float = 0.1,
    ) -> None:
        self.store = store
        self.snapshot = AdminSnapshot()
        self._on_change = on_change
        self._poll_seconds = poll_seconds
        self._task: asyncio.Task[None] | None = None
        self._miss_check: asyncio.Task[bool] | None = None
        self._last_miss_check = 0.0
        self._miss_check_started = 0.0
        self._failing = False
        # monotonic time of the last read the store answered (None: never)
        self.synced_at: float | None = None

    async def start(self) -> None:
        await self.sync_quietly()
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        for task in (self._task, self._miss_check):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def sync_age(self) -> float | None:
        return None if self.synced_at is None else time.monotonic() - self.synced_at

    async def sync(self) -> bool:
        """Read the store's version, and the whole set when it moved: True when it did."""
        version = await self.store.version()
        self.synced_at = time.monotonic()
        if version == self.snapshot.version:
            return False
        self.adopt(await self.store.snapshot(self.snapshot))
        return True

    def adopt(self, snapshot: AdminSnapshot) -> None:
        """A snapshot read by this process (after its own change, or a poll). The store is
        the authority even when its version went down (a Redis that lost its data); two
        reads finishing out of order are put right by the next poll, which sees the
        version differ and reads again."""
        self.snapshot = snapshot
        self.synced_at = time.monotonic()
        self._on_change(snapshot)

    async def sync_quietly(self) -> bool:
        try:
            changed = await self.sync()
        except (StoreUnavailable, OSError) as exc:
            if not self._failing:
                log.warning(
                    "runtime keys: the admin store did not answer (%s); the last known set "
                    "(version %d) keeps serving",
                    exc,
                    self.snapshot.version,
                )
            self._failing = True
            return False
        except Exception:
            log.exception("runtime keys: reading the admin store failed; the last set serves")
            return False
        if self._failing:
            log.info(
                "runtime keys: the admin store answers again (version %d)", self.snapshot.version
            )
        self._failing = False
        return changed

    async def caught_up(self) -> bool:
        """For a key this process does not know: True when the set changed (so
        authenticating again may succeed). Only a version read that starts after the
        call counts: one that was already on its way may predate the key."""
        arrived = time.monotonic()
        seen = self.snapshot.version
        while True:
            check = self._miss_check
            if check is None or check.done():
                self._miss_check_started = time.monotonic()
                self._miss_check = asyncio.get_running_loop().create_task(self._spaced_check())
                continue
            started_after = self._miss_check_started >= arrived
            # shielded: a client that goes away does not cancel the others' check
            await asyncio.shield(check)
            if started_after or self.snapshot.version != seen:
                return self.snapshot.version != seen

    async def _spaced_check(self) -> bool:
        wait = self._last_miss_check + MISS_SPACING_SECONDS - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last_miss_check = time.monotonic()
        return await self.sync_quietly()

    async def _poll(self) -> None:
        task = asyncio.current_task()
        while True:
            await asyncio.sleep(self._poll_seconds)
            await self.sync_quietly()
            if task is not None and task.cancelling():
                # stop() cancelled it mid-read and the Redis client swallowed the
                # CancelledError (redis/redis-py#2028, #2551): without this the loop
                # polls on, and stop() waits for it forever
                raise asyncio.CancelledError
