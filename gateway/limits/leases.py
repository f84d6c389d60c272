"""Holding concurrency leases for the life of a request or a stream.

`async with holding(store, admission.leases): ...` renews the leases while the body
runs (a stream may outlive a lease's TTL) and releases them when it ends, however it
ends: returned, raised, or cancelled because the client went away. Should the release
itself fail, the leases still lapse at their TTL.
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
    store: LimitStore, leases: Sequence[Lease], *, renew_every_seconds: float | None = None
) -> AsyncIterator[None]:
    if not leases:
        yield
        return
    interval = renew_every_seconds or min(lease.ttl_seconds for lease in leases) / 3
    renewal = asyncio.create_task(_keep_renewed(store, leases, interval))
    try:
        yield
    finally:
        renewal.cancel()
        # shielded: a cancelled request still gives its slot back
        await asyncio.shield(_release(store, leases))


async def _keep_renewed(store: LimitStore, leases: Sequence[Lease], interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await store.renew(leases)
        except StoreUnavailable:
            continue


async def _release(store: LimitStore, leases: Sequence[Lease]) -> None:
    with suppress(StoreUnavailable):
        await store.release(leases)
