"""Circuit breakers whose state lives in Redis, so every gateway replica agrees.

The state machine is the local one (:mod:`gateway.resilience.breaker`), run by one Lua
script (`shared_breaker.lua`) on Redis server time. The hot path does not pay a round
trip per request: each breaker caches the state it last read and batches outcomes,
syncing both in one script call at most every `refresh_interval` seconds. Only the rare
half-open trial slots and trial verdicts go to Redis at once, since they are global.

Every outcome is also fed to a local breaker. When Redis errors or is slower than
`timeout`, the breaker decides from that local one and leaves Redis alone for
`redis_retry_interval`; nothing raises into the request path, and it returns to the
shared state by itself when Redis answers again. The board logs that once for all its
breakers (:class:`SharedStateHealth`), not once per deployment.

Cooldowns (429 back-pressure) stay local: they last about a second, and each replica
meets the upstream's 429s itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.resilience.breaker import (
    WINDOW_BUCKETS,
    Blocked,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    TransitionHook,
    Verdict,
)

Clock = Callable[[], float]
# one Redis, or a Redis Cluster (every script call touches one key, so one slot)
RedisLike = Redis | RedisCluster

logger = logging.getLogger(__name__)

_STATES: dict[str, BreakerState] = {
    "closed": "closed",
    "open": "open",
    "half_open": "half_open",
}


def breaker_key(key_prefix: str, name: str) -> str:
    """The breaker's hash; the hash tag keeps it to one slot of a Redis Cluster (braces
    in a name would end the tag early, so they are percent-encoded, as limit keys are)."""
    clean = name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return f"{key_prefix}:breaker:{{{clean}}}"


def load_script_source() -> str:
    return resources.files("gateway.resilience").joinpath("shared_breaker.lua").read_text()


@dataclass(slots=True)
class _PendingOutcomes:
    """Outcomes not yet sent to Redis, in the shape the script adds them."""

    successes: int = 0
    failures: int = 0
    # failures since the last success in this batch
    trailing_failures: int = 0

    def add(self, failed: bool) -> None:
        if failed:
            self.failures += 1
            self.trailing_failures += 1
        else:
            self.successes += 1
            self.trailing_failures = 0


@dataclass(frozen=True, slots=True)
class _Reply:
    state: BreakerState
    open_remaining: float
    granted: bool
    opened_ago: float


class SharedStateHealth:
    """Whether the breakers of one process reach Redis: logs the change once for all of
    them (a board has one per deployment; a Redis outage is one event)."""

    def __init__(self) -> None:
        self.degraded_breakers: set[str] = set()

    def failed(self, name: str, error: Exception) -> None:
        if not self.degraded_breakers:
            # the error's type only: a Redis error message can carry the URL's password
            logger.warning(
                "shared circuit breakers: Redis unreachable (%s), deciding locally",
                type(error).__name__,
            )
        self.degraded_breakers.add(name)

    def reached(self, name: str) -> None:
        if name not in self.degraded_breakers:
            return
        self.degraded_breakers.discard(name)
        if not self.degraded_breakers:
            logger.info("shared circuit breakers: Redis reachable again, state shared")


class SharedCircuitBreaker:
    """A breaker shared through Redis; the async twin of :class:`CircuitBreaker`."""

    def __init__(
        self,
        redis: RedisLike,
        name: str,
        config: BreakerConfig | None = None,
        *,
        key_prefix: str = "gw",
        refresh_interval: float = 0.1,
        timeout: float = 0.05,
        redis_retry_interval: float = 1.0,
        clock: Clock = time.monotonic,
        on_transition: TransitionHook | None = None,
        script_source: str | None = None,
        health: SharedStateHealth | None = None,
    ) -> None:
        self.name = name
        self._health = health or SharedStateHealth()
        self._config = config or BreakerConfig()
        self._local = CircuitBreaker(name, self._config, clock=clock)
        self._key = breaker_key(key_prefix, name)
        self._script = redis.register_script(script_source or load_script_source())
        self._refresh_interval = refresh_interval
        self._timeout = timeout
        self._redis_retry_interval = redis_retry_interval
        self._clock = clock
        self._on_transition = on_transition
        self._cached: BreakerState = "closed"
        self._open_until = 0.0
        self._opened_at = 0.0
        self._synced_at = -math.inf
        self._redis_quiet_until = -math.inf
        self._degraded = False
        self._syncing = False
        self._pending = _PendingOutcomes()
        # trial slots this process holds in Redis, awaiting their verdict
        self._probes_held = 0
        # after Redis refused a trial slot, refuse locally until the next refresh, so a
        # long trial request does not cost every other request a round trip
        self._trial_refused_until = -math.inf

    @property
    def config(self) -> BreakerConfig:
        return self._config

    def reconfigure(self, config: BreakerConfig) -> None:
        self._config = config
        self._local.reconfigure(config)

    @property
    def degraded(self) -> bool:
        """True while Redis is failing and decisions come from the local breaker."""
        return self._degraded

    @property
    def state(self) -> BreakerState:
        """The last known state (no Redis call): for metrics and the planner."""
        if self._degraded:
            return self._local.state
        return self._effective_state()

    @property
    def local_state(self) -> BreakerState:
        """The state of the local fallback, from this process's outcomes alone."""
        return self._local.state

    def would_allow(self) -> bool:
        """Whether a request would likely be let through, from the cache alone."""
        if self._degraded:
            return self._local.would_allow()
        state = self._effective_state()
        if state == "half_open":
            return self._clock() >= self._trial_refused_until
        return state == "closed"

    def blocked(self) -> Blocked | None:
        """Why a request should go elsewhere, from the cache alone (no round trip)."""
        now = self._clock()
        if not self.would_allow():
            if self._degraded:
                return self._local.blocked()
            until = self._open_until if self._cached == "open" else now
            return Blocked("circuit_open", self._opened_at, until)
        cooldown = self._local.cooldown
        if cooldown.active(now):
            return Blocked("cooldown", cooldown.since, cooldown.until)
        return None

    def cool_down(self, hint: float | None) -> bool:
        return self._local.cool_down(hint)

    async def record(self, outcome: Verdict) -> None:
        if outcome == "healthy":
            await self.record_success()
        elif outcome == "failure":
            await self.record_failure()
        else:
            await self.release()

    async def allow(self) -> bool:
        if self._stale():
            await self.refresh()
        if self._degraded:
            return self._local.allow()
        state = self._effective_state()
        if state != "half_open":
            return state == "closed"
        if self._clock() < self._trial_refused_until:
            return False
        reply = await self._run("probe")
        if reply is None:
            return self._local.allow()
        if not reply.granted:
            self._trial_refused_until = self._clock() + self._refresh_interval
        # a grant while closed (another replica's trial closed it) is no trial of ours
        elif reply.state == "half_open":
            self._probes_held += 1
        return reply.granted

    async def record_success(self) -> None:
        await self._record(failed=False)

    async def record_failure(self) -> None:
        await self._record(failed=True)

    async def release(self) -> None:
        """A request let through ended without a verdict (the client went away)."""
        self._local.release()
        if self._probes_held > 0:
            self._probes_held -= 1
            await self._run("release")

    async def refresh(self) -> None:
        """Send batched outcomes and read the shared state now. If a refresh is
        already in flight this returns at once and the cached state stands."""
        if self._syncing:
            return
        self._syncing = True
        batch, self._pending = self._pending, _PendingOutcomes()
        try:
            await self._run("sync", batch)
        finally:
            self._synced_at = self._clock()
            self._syncing = False

    async def _record(self, failed: bool) -> None:
        if failed:
            self._local.record_failure()
        else:
            self._local.record_success()
        if self._probes_held > 0:
            self._probes_held -= 1
            await self._run("probe_fail" if failed else "probe_ok")
            return
        self._pending.add(failed)
        # a run of failures long enough to trip goes out at once, not after the interval
        tripping = self._pending.trailing_failures >= self._config.failure_threshold
        if tripping or self._stale():
            await self.refresh()

    def _stale(self) -> bool:
        return self._clock() - self._synced_at >= self._refresh_interval

    def _effective_state(self) -> BreakerState:
        if self._cached == "open" and self._clock() >= self._open_until:
            self._note_state("half_open")
        return self._cached

    def _note_state(self, new: BreakerState) -> None:
        old, self._cached = self._cached, new
        if old != new and self._on_transition is not None:
            self._on_transition(self.name, old, new)

    async def _run(self, op: str, batch: _PendingOutcomes | None = None) -> _Reply | None:
        if self._clock() < self._redis_quiet_until:
            return None
        counts = batch or _PendingOutcomes()
        config = self._config
        args: list[str | int | float] = [
            op,
            counts.successes,
            counts.failures,
            counts.trailing_failures,
            int(counts.successes > 0),
            config.failure_threshold,
            max(1, round(config.window_seconds * 1000)),
            config.error_rate,
            config.min_requests,
            max(1, round(config.open_seconds * 1000)),
            config.half_open_probes,
            WINDOW_BUCKETS,
            max(1, round(config.max_open_seconds * 1000)),
            config.half_open_successes,
        ]
        # any failure, a Redis fault or a reply we cannot read, must not reach the
        # request path: the local breaker takes over instead
        try:
            async with asyncio.timeout(self._timeout):
                raw = await self._script(keys=[self._key], args=args)
            reply = _parse_reply(raw)
        except Exception as error:
            self._enter_degraded(error)
            return None
        self._health.reached(self.name)
        self._degraded = False
        now = self._clock()
        self._open_until = now + reply.open_remaining
        if reply.opened_ago > 0:
            self._opened_at = now - reply.opened_ago
        self._note_state(reply.state)
        return reply

    def _enter_degraded(self, error: Exception) -> None:
        self._redis_quiet_until = self._clock() + self._redis_retry_interval
        self._probes_held = 0
        self._health.failed(self.name, error)
        self._degraded = True


def _parse_reply(raw: Any) -> _Reply:
    state_raw, remaining_ms, granted, opened_ago_ms = raw
    name = state_raw.decode() if isinstance(state_raw, bytes) else str(state_raw)
    return _Reply(
        state=_STATES[name],
        open_remaining=int(remaining_ms) / 1000.0,
        granted=int(granted) == 1,
        opened_ago=int(opened_ago_ms) / 1000.0,
    )


class SharedBreakerBoard:
    """The shared breakers of one process, keyed by name like :class:`BreakerBoard`."""

    def __init__(
        self,
        redis: RedisLike,
        default: BreakerConfig | None = None,
        *,
        key_prefix: str = "gw",
        refresh_interval: float = 0.1,
        timeout: float = 0.05,
        redis_retry_interval: float = 1.0,
        clock: Clock = time.monotonic,
        on_transition: TransitionHook | None = None,
        owns_client: bool = False,
    ) -> None:
        self._redis = redis
        self._owns_client = owns_client
        self._default = default or BreakerConfig()
        self._key_prefix = key_prefix
        self._refresh_interval = refresh_interval
        self._timeout = timeout
        self._redis_retry_interval = redis_retry_interval
        self._clock = clock
        self._on_transition = on_transition
        self._script_source = load_script_source()
        self._breakers: dict[str, SharedCircuitBreaker] = {}
        self.health = SharedStateHealth()
        self._refresher: asyncio.Task[None] | None = None

    def get(self, name: str, config: BreakerConfig | None = None) -> SharedCircuitBreaker:
        breaker = self._breakers.get(name)
        if breaker is None:
            breaker = SharedCircuitBreaker(
                self._redis,
                name,
                config or self._default,
                key_prefix=self._key_prefix,
                refresh_interval=self._refresh_interval,
                timeout=self._timeout,
                redis_retry_interval=self._redis_retry_interval,
                clock=self._clock,
                on_transition=self._on_transition,
                script_source=self._script_source,
                health=self.health,
            )
            self._breakers[name] = breaker
        elif config is not None and config != breaker.config:
            breaker.reconfigure(config)
        return breaker

    def states(self) -> dict[str, BreakerState]:
        return {name: breaker.state for name, breaker in self._breakers.items()}

    @property
    def degraded(self) -> bool:
        """True while some breaker decides locally because Redis failed it."""
        return bool(self.health.degraded_breakers)

    async def refresh_all(self) -> None:
        """Sync every breaker, so the dispatcher's view, read from the caches, stays
        fresh even for deployments this process has not called lately."""
        await asyncio.gather(*(breaker.refresh() for breaker in list(self._breakers.values())))

    async def start(self) -> None:
        """Refresh every breaker once per refresh interval in the background: another
        replica's ejection reaches this one within that interval, traffic or not."""
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_forever(), name="breakers")

    async def stop(self) -> None:
        task, self._refresher = self._refresher, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._owns_client:
            await self._redis.aclose()

    async def _refresh_forever(self) -> None:
        interval = max(self._refresh_interval, 0.01)
        task = asyncio.current_task()
        while True:
            await asyncio.sleep(interval)
            # refresh() never raises: a failing Redis puts breakers in local mode
            await self.refresh_all()
            if task is not None and task.cancelling():
                # a cancellation the Redis client swallowed mid-call (redis/redis-py#2028):
                # honoured here, or closing would wait for this loop forever
                raise asyncio.CancelledError
