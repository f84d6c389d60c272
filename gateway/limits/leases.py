"""Holding concurrency leases for the life of a request or a stream.

`async with holding(store, admission.leases): ...` renews the leases while the body
runs (a stream may outlive a lease's TTL) and releases them when it ends, however it
ends: returned, raised, or cancelled because the client went away. Should the release
itself fail, the leases still lapse at their TTL.

With `release=False` the caller frees the leases itself, in the request's settlement
(one store round trip for both); `holding` then only keeps them renewed.

Most requests end long before their first renewal is due, so renewal starts as a loop
timer, not a task: a task per request cost more than the rest of lease handling.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress

from gateway.errors import StoreUnavailable
from gateway.limits.spec import Lease
from gateway.limits.store import LimitStore


@asynccontextmanager
async def holding(
    store: LimitStore,
    leases: Sequence[Lease],
    *,
    renew_every_seconds: float | None = None,
    release: bool = True,
) -> AsyncIterator[None]:
    if not leases:
        yield
        return
    interval = renew_every_seconds or min(lease.ttl_seconds for lease in leases) / 3
    renewal = _Renewal(store, leases, interval)
    try:
        yield
    finally:
        renewal.stop()
        if release:
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
