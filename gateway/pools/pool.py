"""A GPU pool at run time: which replica serves a request, and when it may start.

    acquire(request) ──> a replica with a free slot?  (balancer over eligible replicas)
         │ yes: reserve the slot, return a lease
         │ no, but some replica is up: wait in the fair queue (bounded, with a timeout)
         │        a released slot goes to the first waiter, in tenant rotation, that
         │        wants that replica (Balancer.preference), else to the next in rotation
         │        queue full / timeout ──> Overloaded (503, retryable)
         │ no replica up (all unhealthy or circuits open) ──> UpstreamUnavailable (502)
    lease.release()  ──> slot freed, next waiter placed
    record_result(lease, ok) ──> the replica's circuit breaker

A slot is reserved when a replica is chosen, before the waiter wakes, so a released slot
cannot be taken by a newcomer ahead of the queue; a waiter that gives up (timeout,
cancellation) after being handed a slot gives it straight back.

The pool is meant for one event loop; nothing here is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from functools import partial

from gateway.errors import Overloaded, UpstreamUnavailable
from gateway.pools.address import ReplicaAddress
from gateway.pools.capacity import max_in_flight
from gateway.pools.fair_queue import FairQueue, QueueFull, Waiter
from gateway.pools.lease import ReplicaLease
from gateway.pools.monitor import PoolMonitor
from gateway.pools.probes import ReplicaProbe
from gateway.pools.replica import Replica
from gateway.providers.base import ProviderClient
from gateway.providers.transport import client_for
from gateway.resilience.breaker import BreakerBoard, BreakerConfig
from gateway.routing.balancing.base import Balancer, BalanceRequest, ReplicaView, eligible
from gateway.routing.balancing.factory import build_balancer
from gateway.settings.server import ProviderSettings, ReplicaPoolSettings

ANONYMOUS_TENANT = "-"
# how deep a freed slot looks into the queue for a waiter that wants its replica
PREFERENCE_SCAN = 256
# a waiter refused by a full pool may try again about this soon
RETRY_AFTER_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Queued:
    request: BalanceRequest
    # the balancer's ranking of all replicas for this request; empty: any will do
    preference: list[int]


class ReplicaPool:
    def __init__(
        self,
        name: str,
        settings: ReplicaPoolSettings,
        *,
        balancer: Balancer | None = None,
        breakers: BreakerBoard | None = None,
        breaker_config: BreakerConfig | None = None,
        client: ProviderClient | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.balancer = balancer or build_balancer(settings)
        board = breakers or BreakerBoard()
        limit = max_in_flight(settings)
        self._replicas = tuple(
            Replica(
                address=address,
                max_in_flight=limit,
                breaker=board.get(f"{name}@{address.base_url}", breaker_config),
            )
            for address in (ReplicaAddress.parse(url) for url in settings.urls)
        )
        self._queue: FairQueue[Queued] = FairQueue(settings.queue_size)
        # the provider's client under the transport seam; a pool built alone (tests,
        # tools) gets one of its own, closed with it
        self._owns_client = client is None
        self._probe = ReplicaProbe(
            client or client_for(name, ProviderSettings(kind="openai", replicas=settings))
        )
        self._monitor_task: asyncio.Task[None] | None = None

    @classmethod
    def from_provider(
        cls,
        name: str,
        provider: ProviderSettings,
        *,
        balancer: Balancer | None = None,
        breakers: BreakerBoard | None = None,
        client: ProviderClient | None = None,
    ) -> ReplicaPool:
        """The pool of a provider config that has `replicas`; breakers from its settings."""
        if provider.replicas is None:
            raise ValueError(f"provider {name!r} has no `replicas`: it is not a GPU pool")
        return cls(
            name,
            provider.replicas,
            balancer=balancer,
            breakers=breakers,
            breaker_config=BreakerConfig.from_settings(provider.breaker),
            client=client,
        )

    @property
    def replicas(self) -> tuple[Replica, ...]:
        return self._replicas

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def views(self) -> list[ReplicaView]:
        return [replica.view() for replica in self._replicas]

    async def acquire(
        self,
        request: BalanceRequest,
        tenant: str | None = None,
        queue_timeout: float | None = None,
    ) -> ReplicaLease:
        """A lease on the replica chosen for `request`, waiting in line if all are full.

        `tenant` (default: `request.tenant`) is the fair-share unit of the queue;
        `queue_timeout` (default: the pool's `queue_timeout_ms`) bounds the wait, in seconds.
        Raises Overloaded when the queue is full or the wait times out, and
        UpstreamUnavailable when no replica is up at all.
        """
        if not len(self._queue):
            index = self._place(request)
            if index is not None:
                return self._lease(index)
        if not any(replica.up for replica in self._replicas):
            raise UpstreamUnavailable(
                f"GPU pool {self.name!r}: none of its {len(self._replicas)} replicas is up "
                "(failed health checks or open circuit breakers)",
                provider=self.name,
            )
        waiter = self._enqueue(request, tenant or request.tenant or ANONYMOUS_TENANT)
        timeout = self.settings.queue_timeout_ms / 1000 if queue_timeout is None else queue_timeout
        try:
            async with asyncio.timeout(timeout):
                index = await waiter.future
        except TimeoutError:
            self._abandon(waiter)
            raise self._overloaded(
                f"no replica freed a slot within {timeout:g} s of waiting"
            ) from None
        except BaseException:
            self._abandon(waiter)
            raise
        return self._lease(index)

    def mark_unreachable(self, lease: ReplicaLease) -> None:
        """A refused connection: take the replica out of rotation now, not after the
        next failed health checks; the next good check brings it back."""
        replica = self._replicas[lease.replica]
        replica.healthy = False
        replica.consecutive_health_failures = max(1, replica.consecutive_health_failures)

    def record_result(self, lease: ReplicaLease, ok: bool) -> None:
        """Feed the outcome of the request made under `lease` to its replica's breaker.

        `ok=False` only for the replica's faults (5xx, timeouts, refused connections),
        not for requests the caller got wrong; see `resilience.breaker.is_breaker_failure`.
        """
        if lease.verdict_recorded:
            return
        lease.verdict_recorded = True
        breaker = self._replicas[lease.replica].breaker
        if ok:
            breaker.record_success()
        else:
            breaker.record_failure()

    async def start(self) -> None:
        """Check every replica once, then keep checking in the background."""
        if self._monitor_task is not None:
            return
        monitor = PoolMonitor(self._replicas, self.settings, self._probe, self._dispatch)
        await monitor.check_once()
        self._monitor_task = asyncio.create_task(monitor.run(), name=f"pool-monitor-{self.name}")

    async def stop(self) -> None:
        task, self._monitor_task = self._monitor_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._owns_client:
            await self._probe.close()

    async def check_now(self) -> None:
        """One round of health checks and scrapes, now (for start-up and tests)."""
        await PoolMonitor(self._replicas, self.settings, self._probe, self._dispatch).check_once()

    def _place(self, request: BalanceRequest) -> int | None:
        index = self.balancer.select(self.views(), request)
        if index is not None:
            replica = self._replicas[index]
            replica.in_flight += 1
            # takes the trial slot when the breaker is half-open
            replica.breaker.allow()
        return index

    def _lease(self, index: int) -> ReplicaLease:
        return ReplicaLease(index, self._replicas[index].url, self._release)

    def _release(self, lease: ReplicaLease) -> None:
        self._free(lease.replica, give_back_trial=not lease.verdict_recorded)
        self._dispatch()

    def _free(self, index: int, give_back_trial: bool) -> None:
        replica = self._replicas[index]
        replica.in_flight -= 1
        if give_back_trial:
            replica.breaker.release()

    def _enqueue(self, request: BalanceRequest, tenant: str) -> Waiter[Queued]:
        waiter = Waiter(tenant, Queued(request, self.balancer.preference(self.views(), request)))
        try:
            displaced = self._queue.push(waiter)
        except QueueFull:
            if not self._queue.capacity:
                raise self._overloaded("queueing is off (queue_size 0)") from None
            raise self._overloaded(
                f"{len(self._queue)} requests are already waiting (queue_size "
                f"{self._queue.capacity})"
            ) from None
        if displaced is not None and not displaced.future.done():
            displaced.future.set_exception(
                self._overloaded(
                    f"the waiting queue is full and tenant {displaced.tenant!r} holds more "
                    "than its fair share of it"
                )
            )
        self._dispatch()
        return waiter

    def _dispatch(self) -> None:
        """Hand free slots to waiters: first to one that wants a replica with room (so a
        queue keeps prefixes together), else to the next in tenant rotation."""
        while len(self._queue):
            views = self.views()
            free = set(eligible(views))
            if not free:
                return
            waiter = self._queue.pop_first(partial(self._wants, free), PREFERENCE_SCAN)
            if waiter is None:
                waiter = self._queue.pop()
            if waiter is None or waiter.future.done():
                continue
            index = self._place(waiter.payload.request)
            if index is None:
                waiter.future.set_exception(self._overloaded("the balancer found no replica"))
            else:
                waiter.future.set_result(index)

    def _wants(self, free: set[int], waiter: Waiter[Queued]) -> bool:
        favourite = self._favourite(waiter.payload)
        return favourite is None or favourite in free

    def _favourite(self, queued: Queued) -> int | None:
        """The first replica in the waiter's ranking that is up; None: no preference."""
        for index in queued.preference:
            if self._replicas[index].up:
                return index
        return None

    def _abandon(self, waiter: Waiter[Queued]) -> None:
        """The waiter gave up; if a slot was already handed to it, pass the slot on."""
        self._queue.discard(waiter)
        future = waiter.future
        if not future.done():
            future.cancel()
            return
        if future.cancelled() or future.exception() is not None:
            return
        self._free(future.result(), give_back_trial=True)
        self._dispatch()

    def _overloaded(self, reason: str) -> Overloaded:
        limit = self._replicas[0].max_in_flight
        return Overloaded(
            f"GPU pool {self.name!r} is overloaded: all {len(self._replicas)} replicas are at "
            f"their limit of {limit} in-flight requests and {reason}; retry later",
            retry_after=RETRY_AFTER_SECONDS,
        )
