"""Holding concurrency leases for the life of a request or a stream.

`async with holding(store, admission.leases): ...` renews the leases while the body
runs (a stream may outlive a lease's TTL) and releases them when it ends, however it
ends: returned, raised, or cancelled because the client went away. Should the release
itself fail, the leases still lapse at their TTL.

Most requests end long before their first renewal is due, so renewal starts as a loop
timer, not a task: a task per request cost more than the rest of lease handling.

The gateway's own requests use a :class:`LeaseKeeper` instead: it only keeps leases
renewed (the request's settlement frees them, one store round trip for both), and one
loop timer sweeps every held lease set, renewing those due together in one store call,
so a request's lease costs a dict entry rather than a timer of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from types import TracebackType

from gateway.errors import StoreUnavailable
from gateway.limits.limit_store import LimitStore
from gateway.limits.spec import Lease


@asynccontextmanager
async def holding(store: LimitStore, leases: Sequence[Lease]) -> AsyncIterator[None]:
    if not leases:
        yield
        return
    renewal = _Renewal(store, leases, min(lease.ttl_seconds for lease in leases) / 3)
    try:
        yield
    finally:
        renewal.stop()
        # shielded: a cancelled request still gives its slot back
        await asyncio.shield(_release(store, leases))


class _Renewal:
    def __init__(self, store: LimitStore, leases: Sequence[Lease], interval: float) -> None:
        self._store = store
        self._leases = leases
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(interval, self._start)

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._keep_renewed())

    async def _keep_renewed(self) -> None:
        while True:
            with suppress(StoreUnavailable):
                await self._store.renew(self._leases)
            await asyncio.sleep(self._interval)

    def stop(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


async def _release(store: LimitStore, leases: Sequence[Lease]) -> None:
    with suppress(StoreUnavailable):
        await store.release(leases)


class LeaseKeeper:
    """Keeps the leases of every request held through it renewed, with one timer.

    A lease set held since `t` is renewed by the first sweep at or after `t + interval`
    (interval: a third of its shortest TTL); sweeps run every half interval, so a renewal
    comes at most half the TTL after the last one. The leases are not released here: the
    request's settlement frees them (one store round trip for both)."""

    def __init__(self, store: LimitStore) -> None:
        self._store = store
        self._held: dict[_Held, None] = {}
        self._period: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Future[None] | None = None
        # the loop its timer runs on, asked for once (on Python 3.11 every
        # asyncio.get_running_loop() is a getpid system call: not one per request);
        # forgotten when it stops or nothing is held
        self._loop: asyncio.AbstractEventLoop | None = None

    def holding(self, leases: Sequence[Lease]) -> _Held:
        shortest = leases[0].ttl_seconds
        for lease in leases:  # (a loop: min over a generator cost more)
            if lease.ttl_seconds < shortest:
                shortest = lease.ttl_seconds
        return _Held(self, leases, shortest / 3)

    @property
    def held(self) -> int:
        return len(self._held)

    def _add(self, held: _Held) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        held.renewed_at = loop.time()
        self._held[held] = None
        period = held.interval / 2
        if self._timer is None or self._period is None or period < self._period:
            if self._timer is not None:
                self._timer.cancel()
            self._period = period
            self._timer = loop.call_later(period, self._sweep)

    def _remove(self, held: _Held) -> None:
        # the timer stays armed: under load the next request would arm it again at once,
        # and with nothing held the sweep does not re-arm it
        self._held.pop(held, None)

    def _sweep(self) -> None:
        self._timer = None
        if not self._held:
            self._period = None
            self._loop = None
            return
        loop = self._loop or asyncio.get_running_loop()
        if self._renewing is None or self._renewing.done():
            # (while a renewal is still out, what is due stays due for the next sweep)
            now = loop.time()
            due: list[Lease] = []
            for held in self._held:
                if now - held.renewed_at >= held.interval:
                    held.renewed_at = now
                    due.extend(held.leases)
            if due:
                self._renewing = asyncio.ensure_future(self._renew(due))
        assert self._period is not None
        self._timer = loop.call_later(self._period, self._sweep)

    async def _renew(self, leases: list[Lease]) -> None:
        with suppress(StoreUnavailable):
            await self._store.renew(leases)

    def stop(self) -> None:
        self._loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._renewing is not None:
            self._renewing.cancel()


class _Held:
    __slots__ = ("interval", "keeper", "leases", "renewed_at")

    def __init__(self, keeper: LeaseKeeper, leases: Sequence[Lease], interval: float) -> None:
        self.keeper = keeper
        self.leases = leases
        self.interval = interval
        self.renewed_at = 0.0

    async def __aenter__(self) -> None:
        self.keeper._add(self)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.keeper._remove(self)
