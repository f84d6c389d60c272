"""Per-route queueing: wait up to a deadline for a bucket to refill instead of refusing
at once (`routes.<r>.queue_ms`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gateway.limits.limit_store import LimitStore
from gateway.limits.spec import Admission, AdmissionRequest

# a concurrency refusal has no exact hint; look again this often
LEASE_POLL_SECONDS = 0.05


async def admit_waiting(
    store: LimitStore,
    request: AdmissionRequest,
    *,
    max_wait_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Admission:
    """Admit `request`, retrying when the store says when it could fit, until
    `max_wait_seconds` have passed. A request that can never fit, or whose budget is
    spent, is answered at once: waiting cannot help it."""
    deadline = clock() + max_wait_seconds
    while True:
        admission = await store.admit(request)
        refusal = admission.refusal
        if refusal is None or refusal.never_fits or refusal.kind == "budget":
            return admission
        wait = refusal.retry_after_seconds or LEASE_POLL_SECONDS
        if refusal.kind == "concurrency":
            wait = min(wait, LEASE_POLL_SECONDS)
        if clock() + wait > deadline:
            return admission
        await sleep(wait)
