"""Circuit breakers and cooldowns, one per deployment or per GPU replica, kept in this
process.

    closed ──(N consecutive failed requests, or error rate >= R over the window
              with at least M requests)──> open, ejection n+1
    open ──(open_seconds x n passed, capped at max_open_seconds)──> half_open
    half_open ──(half_open_successes trial requests succeeded)──> closed
    half_open ──(a request failed)──> open, ejection n+1

Only upstream ill health is a failure (:func:`verdict`): refused or broken connections,
timeouts, 5xx, broken streams, rejected credentials. Back-pressure (429, Anthropic's
529, Gemini's RESOURCE_EXHAUSTED) is no failure: :meth:`CircuitBreaker.cool_down` sets
the deployment aside for the time the provider asked, and the dispatcher prefers other
candidates meanwhile. A 4xx the request caused counts for nothing.

Ejection time grows like Envoy's outlier detection: the n-th consecutive ejection lasts
`open_seconds * n`, at most `max_open_seconds`; every `open_seconds` spent closed
forgets one ejection. Half-open lets `half_open_probes` trial requests through at once
and doubles that with every trial that succeeds, so a healed upstream is back to full
traffic after `half_open_successes` answers, not one request at a time. A trial that
never reports back (its task was cancelled) frees its slot after `open_seconds`, so a
lost probe cannot wedge the breaker. Outcomes that arrive while open (requests admitted
before it opened) are ignored.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import GatewayError, UpstreamError, UpstreamRejected

BreakerState = Literal["closed", "open", "half_open"]
# what one request's outcome says of the upstream
Verdict = Literal["healthy", "failure", "backpressure", "neutral"]
# why a candidate is set aside
BlockReason = Literal["circuit_open", "cooldown"]
Clock = Callable[[], float]
# (breaker name, old state, new state), for metrics and logs
TransitionHook = Callable[[str, BreakerState, BreakerState], None]

# the sliding window is kept as this many time slices, so its memory is constant
WINDOW_BUCKETS = 10
# upstream statuses that mean "too busy, come back later", not "broken"
BACKPRESSURE_STATUSES = frozenset({429, 529})
# doubling the probe slots past this is full traffic anyway
_MAX_RAMP_EXPONENT = 30


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
    def max_open_seconds(self) -> float: ...
    @property
    def half_open_probes(self) -> int: ...
    @property
    def half_open_successes(self) -> int: ...
    @property
    def cooldown_seconds(self) -> float: ...
    @property
    def max_cooldown_seconds(self) -> float: ...
    @property
    def shared(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = 5
    window_seconds: float = 30.0
    error_rate: float = 0.5
    min_requests: int = 10
    # the first ejection's length; the n-th lasts n times this, capped
    open_seconds: float = 10.0
    max_open_seconds: float = 300.0
    # trial slots when half-open begins; each success doubles them
    half_open_probes: int = 1
    # successful trials that close the breaker
    half_open_successes: int = 3
    # a 429 without a retry-after hint sets the deployment aside this long
    cooldown_seconds: float = 1.0
    # a hint longer than this is cut to it (a misbehaving upstream cannot park itself)
    max_cooldown_seconds: float = 60.0
    # kept in Redis for every replica (see boards.py); a local breaker ignores it
    shared: bool = False

    def __post_init__(self) -> None:
        if min(self.failure_threshold, self.min_requests, self.half_open_probes) < 1:
            raise ValueError("failure_threshold, min_requests, half_open_probes must be >= 1")
        if self.half_open_successes < 1:
            raise ValueError("half_open_successes must be >= 1")
        if not (self.window_seconds > 0 and self.open_seconds > 0):
            raise ValueError("window_seconds and open_seconds must be positive")
        if self.max_open_seconds < self.open_seconds:
            raise ValueError("max_open_seconds must be at least open_seconds")
        if self.cooldown_seconds < 0 or self.max_cooldown_seconds < self.cooldown_seconds:
            raise ValueError("need 0 <= cooldown_seconds <= max_cooldown_seconds")
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
            max_open_seconds=settings.max_open_seconds,
            half_open_probes=settings.half_open_probes,
            half_open_successes=settings.half_open_successes,
            cooldown_seconds=settings.cooldown_seconds,
            max_cooldown_seconds=settings.max_cooldown_seconds,
            shared=settings.shared,
        )

    def trips(self, consecutive_failures: int, requests: int, failures: int) -> bool:
        """Whether a closed breaker with these counts opens."""
        if consecutive_failures >= self.failure_threshold:
            return True
        return requests >= self.min_requests and failures >= self.error_rate * requests

    def ejection_seconds(self, ejections: int) -> float:
        """How long the `ejections`-th consecutive ejection (>= 1) lasts."""
        return min(self.max_open_seconds, self.open_seconds * max(1, ejections))

    def probe_slots(self, successes: int) -> int:
        """Trial requests let through at once after `successes` successful trials."""
        return self.half_open_probes << min(successes, _MAX_RAMP_EXPONENT)

    def cooldown_for(self, hint: float | None) -> float:
        """The cooldown after a 429 whose `retry-after` said `hint` seconds (or nothing)."""
        if hint is None or not math.isfinite(hint):
            return self.cooldown_seconds
        return min(self.max_cooldown_seconds, max(0.0, hint))


def is_backpressure(error: BaseException) -> bool:
    """A 429 (or Anthropic's 529, Gemini's RESOURCE_EXHAUSTED, which maps to 429)."""
    return isinstance(error, UpstreamError) and error.upstream_status in BACKPRESSURE_STATUSES


def verdict(error: BaseException | None) -> Verdict:
    """What one request's final outcome says of the upstream that produced it.

    A failure is what says the deployment is unwell: connect errors, timeouts, 5xx,
    broken or unreadable responses, and credentials it refuses (every request would
    fail the same way). A 4xx the request caused, our own refusals (a full GPU queue)
    and cancellations say nothing about the upstream.
    """
    if error is None:
        return "healthy"
    if is_backpressure(error):
        return "backpressure"
    if isinstance(error, UpstreamRejected):
        # a 408 the provider timed out on is its ill health; any other 4xx is ours
        return "failure" if error.upstream_status == 504 else "neutral"
    if isinstance(error, UpstreamError):
        return "failure"
    if isinstance(error, GatewayError):
        return "neutral"
    return "failure" if isinstance(error, ConnectionError | TimeoutError) else "neutral"


def is_breaker_failure(error: BaseException) -> bool:
    """Whether an attempt's error counts against the upstream's breaker."""
    return verdict(error) == "failure"


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a candidate is set aside now, since when, and until when (same clock)."""

    reason: BlockReason
    since: float
    until: float


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


class Cooldown:
    """Back-pressure from one upstream: set aside until the time it asked for."""

    def __init__(self) -> None:
        self.since = 0.0
        self.until = 0.0

    def extend(self, now: float, seconds: float) -> bool:
        """Cool down for `seconds` from `now` (never shortening a longer one); True when
        a new cooldown began (the deployment was not cooling already)."""
        if seconds <= 0:
            return False
        began = now >= self.until
        if began:
            self.since = now
        self.until = max(self.until, now + seconds)
        return began

    def active(self, now: float) -> bool:
        return now < self.until


class CircuitBreaker:
    """One upstream's breaker and cooldown. Not thread-safe; meant for one event loop."""

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
        self._opened_at = 0.0
        self._open_until = 0.0
        self._consecutive_failures = 0
        self._window = OutcomeWindow(self._config.window_seconds)
        # consecutive ejections (decays while closed) and when the breaker last closed
        self._ejections = 0
        self._closed_at = self._clock()
        # start times of trial requests let through while half-open, and their successes
        self._probes: list[float] = []
        self._probe_successes = 0
        self.cooldown = Cooldown()

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
            self._probe_successes = 0
            self._move_to("half_open")
        return self._state

    @property
    def ejections(self) -> int:
        """Consecutive ejections so far (what the next open's length grows from)."""
        return self._ejections

    @property
    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial request through; 0 otherwise."""
        if self.state != "open":
            return 0.0
        # `now + seconds - now` can round a hair above `seconds` on a large clock
        left = min(self._open_until - self._clock(), self._config.max_open_seconds)
        return max(0.0, left)

    @property
    def probe_slots(self) -> int:
        """Trial requests half-open lets through at once now."""
        return self._config.probe_slots(self._probe_successes)

    def blocked(self) -> Blocked | None:
        """Why a new request should go elsewhere now, or None when it may come here.

        An open circuit, a half-open one whose trial slots are taken, or a cooldown.
        """
        now = self._clock()
        if not self.would_allow():
            until = self._open_until if self._state == "open" else now
            return Blocked("circuit_open", self._opened_at, until)
        if self.cooldown.active(now):
            return Blocked("cooldown", self.cooldown.since, self.cooldown.until)
        return None

    def would_allow(self) -> bool:
        """Whether the circuit would let a request through now, without taking a
        half-open trial slot (for the planner and balancer, which only look). A
        cooldown is not the circuit's business: see :meth:`blocked`."""
        state = self.state
        if state == "half_open":
            self._forget_lost_probes()
            return len(self._probes) < self.probe_slots
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
        """A request let through ended without a verdict (the client went away, or its
        outcome said nothing of the upstream)."""
        if self._probes:
            self._probes.pop(0)

    def record_success(self) -> None:
        state = self.state
        if state == "half_open":
            if not self._probes:
                return  # not a trial of ours: admitted before the circuit opened
            self._probes.pop(0)
            self._probe_successes += 1
            if self._probe_successes >= self._config.half_open_successes:
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

    def cool_down(self, hint: float | None) -> bool:
        """Back-pressure: set the deployment aside for `hint` seconds (its retry-after),
        or the configured default. True when a new cooldown began."""
        return self.cooldown.extend(self._clock(), self._config.cooldown_for(hint))

    def record(self, outcome: Verdict) -> None:
        """Feed one request's final outcome (see :func:`verdict`)."""
        if outcome == "healthy":
            self.record_success()
        elif outcome == "failure":
            self.record_failure()
        else:
            self.release()

    def _forget_lost_probes(self) -> None:
        oldest_live = self._clock() - self._config.open_seconds
        self._probes = [started for started in self._probes if started > oldest_live]

    def _open(self) -> None:
        now = self._clock()
        if self._state == "closed":
            forgiven = math.floor((now - self._closed_at) / self._config.open_seconds)
            self._ejections = max(0, self._ejections - forgiven)
        self._ejections += 1
        self._opened_at = now
        self._open_until = now + self._config.ejection_seconds(self._ejections)
        self._reset_counts()
        self._move_to("open")

    def _close(self) -> None:
        self._closed_at = self._clock()
        self._reset_counts()
        self._move_to("closed")

    def _reset_counts(self) -> None:
        self._consecutive_failures = 0
        self._window.clear()
        self._probes.clear()
        self._probe_successes = 0

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
        elif config is not None and config is not breaker.config and config != breaker.config:
            # a policy's configs are built once: the identity test spares a field-by-field
            # comparison per request
            breaker.reconfigure(config)
        return breaker

    def states(self) -> dict[str, BreakerState]:
        return {name: breaker.state for name, breaker in self._breakers.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._breakers

    def __len__(self) -> int:
        return len(self._breakers)
