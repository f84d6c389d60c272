"""When to try an upstream call again, and how long to wait first.

A failed attempt is retried only if all of these hold:

- the error is retryable (:func:`is_retryable`): connect errors, timeouts, upstream
  408/429/500/502/503/504/529, Gemini UNAVAILABLE/RESOURCE_EXHAUSTED (which the
  providers raise as GatewayErrors with `retryable=True`);
- no byte of a stream has reached the client yet;
- the request is safe to repeat, or the policy allows repeating it anyway
  (`retry_non_idempotent`), or the upstream provably never processed it (the
  connection was refused, or it answered 429/529 back-pressure);
- attempts are left, and the wait ends before the total deadline.

The wait is the upstream's own hint (`Retry-After` / `retry-after-ms`, carried as
`GatewayError.retry_after`) when it gave one, else exponential backoff with full
jitter: uniform in [0, min(max_delay, base_delay * 2**(n-1))] after the n-th failure.
A hint that would end past the deadline stops the retries instead of being shortened,
since an early retry would only be refused again; the caller moves on to its fallback.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import GatewayError, UpstreamError, UpstreamUnreachable
from gateway.resilience.breaker import is_backpressure

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})

# 2**62 times any sane base delay is far past any max_delay; capping the exponent keeps
# the float arithmetic from overflowing on absurd attempt counts.
_MAX_EXPONENT = 62

StopReason = Literal[
    "retry",
    "not_retryable",
    "stream_started",
    "not_idempotent",
    "attempts_exhausted",
    "deadline",
]


class RetrySettingsLike(Protocol):
    """The fields of `gateway.settings.server.RetrySettings` this module reads."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def base_delay_seconds(self) -> float: ...
    @property
    def max_delay_seconds(self) -> float: ...
    @property
    def deadline_seconds(self) -> float: ...
    @property
    def retry_non_idempotent(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`max_attempts` counts the first try; `deadline` is the total budget in seconds."""

    max_attempts: int = 3
    base_delay: float = 0.1
    max_delay: float = 5.0
    deadline: float = 60.0
    retry_non_idempotent: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must not be negative")
        if not self.deadline > 0:
            raise ValueError(f"deadline must be positive, got {self.deadline}")

    @classmethod
    def from_settings(cls, settings: RetrySettingsLike) -> RetryPolicy:
        return cls(
            max_attempts=settings.max_attempts,
            base_delay=settings.base_delay_seconds,
            max_delay=settings.max_delay_seconds,
            deadline=settings.deadline_seconds,
            retry_non_idempotent=settings.retry_non_idempotent,
        )


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """`delay` is the wait before the next attempt; 0 when `retry` is False."""

    retry: bool
    delay: float
    reason: StopReason
    # True when the delay came from the upstream's Retry-After hint
    from_hint: bool = False


def backoff_cap(policy: RetryPolicy, failed_attempts: int) -> float:
    """The upper bound of the jittered wait after `failed_attempts` failures (>= 1)."""
    exponent = min(max(failed_attempts - 1, 0), _MAX_EXPONENT)
    return min(policy.max_delay, policy.base_delay * (2.0**exponent))


def backoff_delay(policy: RetryPolicy, failed_attempts: int, rng: random.Random) -> float:
    """Full jitter: uniform in [0, backoff_cap]."""
    return rng.uniform(0.0, backoff_cap(policy, failed_attempts))


def is_retryable(error: BaseException) -> bool:
    """Whether trying the same upstream again may succeed.

    A provider that set `retryable` on the error instance has the last word (it knows,
    say, that a 429 means an exhausted quota, not a busy server). Otherwise an upstream
    status in RETRYABLE_STATUSES is retryable, then the error class's own flag decides.
    Built-in connection and timeout errors that escaped mapping count as retryable.
    """
    if isinstance(error, GatewayError):
        if "retryable" in vars(error):
            return bool(error.retryable)
        if isinstance(error, UpstreamError) and error.upstream_status in RETRYABLE_STATUSES:
            return True
        return error.retryable
    return isinstance(error, ConnectionError | TimeoutError)


def never_processed(error: BaseException) -> bool:
    """Whether the upstream surely did no work for the failed attempt, so repeating it
    cannot do anything twice: a refused connection, or a back-pressure refusal."""
    return isinstance(error, UpstreamUnreachable | ConnectionRefusedError) or is_backpressure(error)


def retry_hint(error: BaseException) -> float | None:
    """The upstream's `Retry-After` in seconds, if the error carries one."""
    if isinstance(error, GatewayError) and error.retry_after is not None:
        hint = float(error.retry_after)
        if math.isfinite(hint):
            return max(0.0, hint)
    return None


def decide_retry(
    policy: RetryPolicy,
    error: BaseException,
    *,
    attempt: int,
    remaining: float,
    rng: random.Random,
    stream_started: bool = False,
    idempotent: bool = True,
) -> RetryDecision:
    """Decide after attempt number `attempt` (1-based) failed with `error`, with
    `remaining` seconds left of the total deadline."""
    if not is_retryable(error):
        return RetryDecision(False, 0.0, "not_retryable")
    if stream_started:
        return RetryDecision(False, 0.0, "stream_started")
    if not idempotent and not policy.retry_non_idempotent and not never_processed(error):
        return RetryDecision(False, 0.0, "not_idempotent")
    if attempt >= policy.max_attempts:
        return RetryDecision(False, 0.0, "attempts_exhausted")
    hint = retry_hint(error)
    delay = hint if hint is not None else backoff_delay(policy, attempt, rng)
    # the next attempt needs time of its own, so waiting until the deadline is no retry
    if delay >= remaining:
        return RetryDecision(False, 0.0, "deadline")
    return RetryDecision(True, delay, "retry", from_hint=hint is not None)
