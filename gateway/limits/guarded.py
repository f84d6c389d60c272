"""What the gateway does when its limit store (Redis) is unreachable.

:class:`GuardedLimitStore` wraps any store. Each call gets `timeout_seconds`, whatever
the store does. When a call fails:

- `fail_open`: the request is admitted without limits (`Admission.degraded`), counted in
  `admitted_unchecked`, and a warning is logged at most once per `log_interval_seconds`.
- `fail_closed`: :class:`gateway.errors.StoreUnavailable` (503) says so, at once.

When the store is down (a refused or reset connection, or `timeouts_to_rest` timeouts
in a row) the guard stops asking it for `probe_interval_seconds`, so requests do not each
wait out a timeout against a dead server; then the next call probes it again, and the
first success puts the guard back to `ok` by itself. A lone timeout fails only its own
call: under a burst, a busy worker's event loop can delay one reply past the timeout
while Redis is healthy, and resting then would stop enforcing limits for every request
of the next second.

Settlement, release and renewal never raise: the request they belong to is already
served. When they fail, reservations stay as reserved (the safe side) and leases expire
on their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

from gateway.errors import StoreUnavailable
from gateway.limits.limit_store import LimitStore
from gateway.limits.spec import Admission, AdmissionRequest, Lease, Settlement

FailureMode = Literal["fail_open", "fail_closed"]
GuardState = Literal["ok", "degraded"]

_T = TypeVar("_T")
_STORE_FAILURES = (StoreUnavailable, TimeoutError, OSError)

log = logging.getLogger("gateway.limits")


class GuardedLimitStore:
    def __init__(
        self,
        inner: LimitStore,
        *,
        mode: FailureMode,
        timeout_seconds: float,
        probe_interval_seconds: float = 1.0,
        log_interval_seconds: float = 60.0,
        timeouts_to_rest: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.mode: FailureMode = mode
        self.state: GuardState = "ok"
        # plain counters for the metrics room to export
        self.failures = 0
        self.admitted_unchecked = 0
        self.refused_unavailable = 0
        self._timeout = timeout_seconds
        self._probe_interval = probe_interval_seconds
        self._log_interval = log_interval_seconds
        self._clock = clock
        self._next_probe = 0.0
        self._next_log = 0.0
        self._failures_since_log = 0
        self._timeouts_in_a_row = 0
        self._timeouts_to_rest = timeouts_to_rest
        # a store that already bounds each call by this deadline needs no second timer
        inner_deadline = inner.call_deadline_seconds
        self._own_timer = inner_deadline is None or inner_deadline > timeout_seconds
        self.call_deadline_seconds: float | None = timeout_seconds

    async def admit(self, request: AdmissionRequest) -> Admission:
        if self._resting():
            return self._unchecked("the limits store is unreachable")
        try:
            admission = await self._guarded(self.inner.admit(request))
        except _STORE_FAILURES as error:
            self._failed(error)
            return self._unchecked(_describe(error))
        self._succeeded()
        return admission

    async def settle(self, settlement: Settlement) -> bool:
        return await self._quietly(lambda: self.inner.settle(settlement), False)

    async def settle_many(
        self, settlements: Sequence[Settlement], *, can_wait: bool = True
    ) -> list[bool]:
        fallback = [False] * len(settlements)
        return await self._quietly(
            lambda: self.inner.settle_many(settlements, can_wait=can_wait), fallback
        )

    async def release(self, leases: Sequence[Lease]) -> None:
        if leases:
            await self._quietly(lambda: self.inner.release(leases), None)

    async def renew(self, leases: Sequence[Lease]) -> int:
        # unknown is treated as held: a served stream is not cut because Redis blinked
        return await self._quietly(lambda: self.inner.renew(leases), len(leases))

    async def ping(self) -> bool:
        try:
            alive = await self._guarded(self.inner.ping())
        except _STORE_FAILURES as error:
            self._failed(error)
            return False
        if alive:
            self._succeeded()
        else:
            self._failed(StoreUnavailable("the limits store did not answer PING"))
        return alive

    async def close(self) -> None:
        await self.inner.close()

    async def _guarded(self, call: Awaitable[_T]) -> _T:
        if not self._own_timer:
            return await call
        async with asyncio.timeout(self._timeout):
            return await call

    async def _quietly(self, call: Callable[[], Awaitable[_T]], fallback: _T) -> _T:
        if self._resting():
            self.failures += 1
            return fallback
        try:
            result = await self._guarded(call())
        except _STORE_FAILURES as error:
            self._failed(error)
            return fallback
        self._succeeded()
        return result

    def _resting(self) -> bool:
        return self.state == "degraded" and self._clock() < self._next_probe

    def _unchecked(self, why: str) -> Admission:
        if self.mode == "fail_open":
            self.admitted_unchecked += 1
            return Admission(allowed=True, degraded=True)
        self.refused_unavailable += 1
        raise StoreUnavailable(
            f"Rate limits and budgets cannot be checked right now ({why}), and this gateway "
            "is configured to refuse requests then (store.on_failure: fail_closed). "
            "Retry shortly.",
            retry_after=self._probe_interval,
        )

    def _failed(self, error: BaseException) -> None:
        now = self._clock()
        self.failures += 1
        self._failures_since_log += 1
        if isinstance(error, TimeoutError):
            self._timeouts_in_a_row += 1
            if self._timeouts_in_a_row < self._timeouts_to_rest:
                return
        self.state = "degraded"
        self._next_probe = now + self._probe_interval
        if now >= self._next_log:
            log.warning(
                "limits store unavailable (%s); %d failed calls since the last report; mode %s",
                _describe(error),
                self._failures_since_log,
                self.mode,
            )
            self._failures_since_log = 0
            self._next_log = now + self._log_interval

    def _succeeded(self) -> None:
        self._timeouts_in_a_row = 0
        if self.state == "degraded":
            log.warning("limits store reachable again; limits are enforced")
            self.state = "ok"
            self._next_log = 0.0
            self._failures_since_log = 0


def _describe(error: BaseException) -> str:
    if isinstance(error, StoreUnavailable):
        return error.message
    if isinstance(error, TimeoutError):
        return "no answer in time"
    return type(error).__name__
