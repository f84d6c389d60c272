"""Circuit breakers, one per deployment or per GPU replica, kept in this process.

    closed ──(N consecutive failures, or error rate >= R over the window
              with at least M requests)──> open
    open ──(open_seconds passed)──> half_open
    half_open ──(a trial request succeeds)──> closed
    half_open ──(a trial request fails)──> open

While open, :meth:`CircuitBreaker.allow` refuses, so the dispatcher moves on to the
next candidate. Half-open lets `half_open_probes` trial requests through at a time; a
trial that never reports back (its task was cancelled) frees its slot after
`open_seconds`, so a lost probe cannot wedge the breaker. Outcomes that arrive while
open (requests admitted before it opened) are ignored.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import UpstreamError, UpstreamRejected
from gateway.resilience.retry import is_retryable

BreakerState = Literal["closed", "open", "half_open"]
Clock = Callable[[], float]
# (breaker name, old state, new state), for metrics and logs
TransitionHook = Callable[[str, BreakerState, BreakerState], None]

# the sliding window is kept as this many time slices, so its memory is constant
WINDOW_BUCKETS = 10


class BreakerSettingsLike(Protocol):
    """The fields of `gateway.settings.server.BreakerSettings` this module reads."""

    @property
    def failure_threshold(self) -> int: ...
    @property
    def window_seconds(self) -> float: ...
    @property
    def error_rate(self) -> float: ...
    @property
    def min_requests(self) -> int: ...
    @property
    def open_seconds(self) -> float: ...
    @property
    def half_open_probes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = 5
    window_seconds: float = 30.0
    error_rate: float = 0.5
    min_requests: int = 10
    open_seconds: float = 10.0
    half_open_probes: int = 1

    def __post_init__(self) -> None:
        if self.failure_threshold < 1 or self.min_requests < 1 or self.half_open_probes < 1:
            raise ValueError("failure_threshold, min_requests, half_open_probes must be >= 1")
        if not (self.window_seconds > 0 and self.open_seconds > 0):
            raise ValueError("window_seconds and open_seconds must be positive")
        if not 0 < self.error_rate <= 1:
            raise ValueError(f"error_rate must be in (0, 1], got {self.error_rate}")

    @classmethod
    def from_settings(cls, settings: BreakerSettingsLike) -> BreakerConfig:
        return cls(
            failure_threshold=settings.failure_threshold,
            window_seconds=settings.window_seconds,
            error_rate=settings.error_rate,
            min_requests=settings.min_requests,
            open_seconds=settings.open_seconds,
            half_open_probes=settings.half_open_probes,
        )

    def trips(self, consecutive_failures: int, requests: int, failures: int) -> bool:
        """Whether a closed breaker with these counts opens."""
        if consecutive_failures >= self.failure_threshold:
            return True
        return requests >= self.min_requests and failures >= self.error_rate * requests


def is_breaker_failure(error: BaseException) -> bool:
    """Whether an attempt's error counts against the upstream's breaker.

    Upstream faults do (5xx, timeouts, refused connections, rejected credentials,
    upstream 429s); a 4xx the caller caused does not, nor do our own refusals.
    """
    if isinstance(error, UpstreamRejected):
        return is_retryable(error)
    if isinstance(error, UpstreamError):
        return True
    return isinstance(error, ConnectionError | TimeoutError)


class OutcomeWindow:
    """Requests and failures over the last `window_seconds`, in WINDOW_BUCKETS slices."""

    def __init__(self, window_seconds: float) -> None:
        self._width = window_seconds / WINDOW_BUCKETS
        # [slice number, requests, failures], oldest first
        self._slices: deque[list[int]] = deque()

    def add(self, now: float, failed: bool) -> None:
        current = self._slice(now)
        self._drop_before(current)
        if not self._slices or self._slices[-1][0] != current:
            self._slices.append([current, 0, 0])
        self._slices[-1][1] += 1
        self._slices[-1][2] += int(failed)

    def counts(self, now: float) -> tuple[int, int]:
        """(requests, failures) in the window ending at `now`."""
        self._drop_before(self._slice(now))
        return sum(s[1] for s in self._slices), sum(s[2] for s in self._slices)

    def clear(self) -> None:
        self._slices.clear()

    def _slice(self, now: float) -> int:
        return math.floor(now / self._width)

    def _drop_before(self, current: int) -> None:
        while self._slices and self._slices[0][0] <= current - WINDOW_BUCKETS:
            self._slices.popleft()


class CircuitBreaker:
    """One upstream's breaker. Not thread-safe; meant for one event loop."""

    def __init__(
        self,
        name: str,
        config: BreakerConfig | None = None,
        *,
        clock: Clock = time.monotonic,
        on_transition: TransitionHook | None = None,
    ) -> None:
        self.name = name
        self._config = config or BreakerConfig()
        self._clock = clock
        self._on_transition = on_transition
        self._state: BreakerState = "closed"
        self._open_until = 0.0
        self._consecutive_failures = 0
        self._window = OutcomeWindow(self._config.window_seconds)
        # start times of trial requests let through while half-open
        self._probes: list[float] = []

    @property
    def config(self) -> BreakerConfig:
        return self._config

    def reconfigure(self, config: BreakerConfig) -> None:
        """Apply new settings (hot reload), keeping the current state."""
        if config.window_seconds != self._config.window_seconds:
            self._window = OutcomeWindow(config.window_seconds)
        self._config = config

    @property
    def state(self) -> BreakerState:
        now = self._clock()
        if self._state == "open" and now >= self._open_until:
            self._probes.clear()
            self._move_to("half_open")
        return self._state

    @property
    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial request through; 0 otherwise."""
        if self.state != "open":
            return 0.0
        return max(0.0, self._open_until - self._clock())

    def would_allow(self) -> bool:
        """Whether :meth:`allow` would let a request through now, without taking a
        half-open trial slot (for the planner, which only looks)."""
        state = self.state
        if state == "half_open":
            self._forget_lost_probes()
            return len(self._probes) < self._config.half_open_probes
        return state == "closed"

    def allow(self) -> bool:
        """Whether to send a request now; in half-open this takes a trial slot, which
        the request's :meth:`record_success`, :meth:`record_failure` or :meth:`release`
        gives back."""
        if not self.would_allow():
            return False
        if self._state == "half_open":
            self._probes.append(self._clock())
        return True

    def release(self) -> None:
        """A request let through ended without a verdict (the client went away)."""
        if self._probes:
            self._probes.pop(0)

    def record_success(self) -> None:
        state = self.state
        if state == "half_open":
            self._close()
        elif state == "closed":
            self._consecutive_failures = 0
            self._window.add(self._clock(), failed=False)

    def record_failure(self) -> None:
        state = self.state
        if state == "half_open":
            self._open()
        elif state == "closed":
            now = self._clock()
            self._consecutive_failures += 1
            self._window.add(now, failed=True)
            requests, failures = self._window.counts(now)
            if self._config.trips(self._consecutive_failures, requests, failures):
                self._open()

    def _forget_lost_probes(self) -> None:
        oldest_live = self._clock() - self._config.open_seconds
        self._probes = [started for started in self._probes if started > oldest_live]

    def _open(self) -> None:
        self._open_until = self._clock() + self._config.open_seconds
        self._reset_counts()
        self._move_to("open")

    def _close(self) -> None:
        self._reset_counts()
        self._move_to("closed")

    def _reset_counts(self) -> None:
        self._consecutive_failures = 0
        self._window.clear()
        self._probes.clear()

    def _move_to(self, new: BreakerState) -> None:
        old, self._state = self._state, new
        if old != new and self._on_transition is not None:
            self._on_transition(self.name, old, new)


class BreakerBoard:
    """The breakers of one process, keyed by name: a deployment name, or for a GPU
    pool one name per replica (for example ``f"{deployment}@{replica_url}"``)."""

    def __init__(
        self,
        default: BreakerConfig | None = None,
        *,
        clock: Clock = time.monotonic,
        on_transition: TransitionHook | None = None,
    ) -> None:
        self._default = default or BreakerConfig()
        self._clock = clock
        self._on_transition = on_transition
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, name: str, config: BreakerConfig | None = None) -> CircuitBreaker:
        """The breaker called `name`, created on first use; a different `config` than
        the breaker has is applied to it (its state is kept)."""
        breaker = self._breakers.get(name)
        if breaker is None:
            breaker = CircuitBreaker(
                name,
                config or self._default,
                clock=self._clock,
                on_transition=self._on_transition,
            )
            self._breakers[name] = breaker
        elif config is not None and config != breaker.config:
            breaker.reconfigure(config)
        return breaker

    def states(self) -> dict[str, BreakerState]:
        return {name: breaker.state for name, breaker in self._breakers.items()}

    def unavailable(self) -> frozenset[str]:
        """Names whose breaker would refuse a request now: the planner skips them."""
        return frozenset(
            name for name, breaker in self._breakers.items() if not breaker.would_allow()
        )

    def __contains__(self, name: object) -> bool:
        return name in self._breakers

    def __len__(self) -> int:
        return len(self._breakers)
