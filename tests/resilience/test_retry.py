from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import (
    InvalidRequest,
    Overloaded,
    RateLimited,
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    UpstreamUnreachable,
)
from gateway.resilience.retry import (
    RetryPolicy,
    backoff_cap,
    backoff_delay,
    decide_retry,
    is_retryable,
)
from gateway.settings.server import RetrySettings


def unavailable(**kwargs: object) -> UpstreamUnavailable:
    return UpstreamUnavailable("upstream down", provider="openai", **kwargs)  # type: ignore[arg-type]


# --- backoff ---------------------------------------------------------------------------


@given(
    base=st.floats(0.0, 10.0),
    cap=st.floats(0.0, 120.0),
    failures=st.integers(1, 2000),
    seed=st.integers(0, 2**32),
)
def test_full_jitter_delay_stays_within_zero_and_capped_exponential(
    base: float, cap: float, failures: int, seed: int
) -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=base, max_delay=cap, deadline=60.0)
    delay = backoff_delay(policy, failures, random.Random(seed))
    bound = min(cap, base * 2.0 ** min(failures - 1, 62))
    assert 0.0 <= delay <= bound


def test_backoff_cap_doubles_per_failure_until_max_delay() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    caps = [backoff_cap(policy, n) for n in range(1, 7)]
    assert caps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_jitter_spreads_over_the_whole_range() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=1.0)
    rng = random.Random(7)
    delays = [backoff_delay(policy, 1, rng) for _ in range(500)]
    assert min(delays) < 0.1
    assert max(delays) > 0.9


def test_policy_converts_from_server_settings() -> None:
    settings = RetrySettings(
        max_attempts=4,
        base_delay_seconds=0.2,
        max_delay_seconds=3.0,
        deadline_seconds=20.0,
        retry_non_idempotent=False,
    )
    assert RetryPolicy.from_settings(settings) == RetryPolicy(4, 0.2, 3.0, 20.0, False)


def test_policy_refuses_zero_attempts() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


# --- what is retryable -----------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 529])
def test_retryable_upstream_statuses_are_retried(status: int) -> None:
    assert is_retryable(UpstreamRejected("busy", status=status, provider="anthropic"))
    assert is_retryable(UpstreamError("busy", provider="anthropic", upstream_status=status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_client_fault_statuses_are_not_retried(status: int) -> None:
    assert not is_retryable(UpstreamRejected("bad", status=status, provider="openai"))


def test_connect_errors_and_timeouts_are_retryable() -> None:
    assert is_retryable(unavailable())
    assert is_retryable(UpstreamTimeout("slow", provider="gemini"))
    assert is_retryable(ConnectionRefusedError())
    assert is_retryable(TimeoutError())
    assert is_retryable(Overloaded("queue full"))


def test_provider_marked_retryable_errors_are_retried() -> None:
    # Gemini's UNAVAILABLE / RESOURCE_EXHAUSTED arrive as errors flagged retryable
    error = UpstreamError("RESOURCE_EXHAUSTED", provider="gemini", retryable=True)
    assert is_retryable(error)


def test_provider_flag_overrides_a_retryable_status() -> None:
    quota = UpstreamRejected("quota gone", status=429, provider="openai", retryable=False)
    assert not is_retryable(quota)


def test_our_own_refusals_and_bugs_are_not_retried() -> None:
    assert not is_retryable(RateLimited("bucket empty"))
    assert not is_retryable(InvalidRequest("bad json"))
    assert not is_retryable(UpstreamMisconfigured("bad key", provider="openai"))
    assert not is_retryable(ValueError("bug"))


# --- one decision ----------------------------------------------------------------------


def decide(error: BaseException, **kwargs: object) -> tuple[bool, float, str]:
    options: dict[str, object] = {"attempt": 1, "remaining": 30.0, "rng": random.Random(1)}
    options.update(kwargs)
    policy = options.pop("policy", RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=4.0))
    decision = decide_retry(policy, error, **options)  # type: ignore[arg-type]
    return decision.retry, decision.delay, decision.reason


def test_retry_after_hint_replaces_backoff() -> None:
    retry, delay, reason = decide(unavailable(retry_after=2.5))
    assert (retry, delay, reason) == (True, 2.5, "retry")


def test_retry_after_hint_past_the_deadline_stops_retrying() -> None:
    assert decide(unavailable(retry_after=10.0), remaining=5.0) == (False, 0.0, "deadline")


def test_backoff_that_would_reach_the_deadline_stops_retrying() -> None:
    policy = RetryPolicy(base_delay=10.0, max_delay=10.0)
    rng = random.Random(3)
    assert decide(unavailable(), policy=policy, remaining=0.0, rng=rng)[2] == "deadline"


def test_no_retry_after_the_stream_reached_the_client() -> None:
    assert decide(unavailable(), stream_started=True)[2] == "stream_started"


def test_non_idempotent_request_is_retried_only_when_configured() -> None:
    strict = RetryPolicy(retry_non_idempotent=False)
    assert decide(unavailable(), policy=strict, idempotent=False)[2] == "not_idempotent"
    assert decide(unavailable(), policy=strict, idempotent=True)[0]
    assert decide(unavailable(), policy=RetryPolicy(), idempotent=False)[0]


def test_last_attempt_is_not_retried() -> None:
    assert decide(unavailable(), attempt=3)[2] == "attempts_exhausted"


def test_non_retryable_error_is_not_retried() -> None:
    assert decide(UpstreamRejected("bad", status=400, provider="openai"))[2] == "not_retryable"


def test_a_strict_policy_still_retries_what_the_upstream_never_processed() -> None:
    strict = RetryPolicy(retry_non_idempotent=False)
    refused = UpstreamUnreachable("connection refused", provider="openai")
    busy = UpstreamRejected("slow down", status=429, provider="openai", retryable=True)
    overloaded = UpstreamUnavailable("overloaded", provider="a", upstream_status=529)
    for error in (refused, busy, overloaded):
        assert decide(error, policy=strict, idempotent=False)[0], error
    timed_out = UpstreamTimeout("slow", provider="openai")
    assert decide(timed_out, policy=strict, idempotent=False)[2] == "not_idempotent"
