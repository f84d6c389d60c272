"""The breaker's state machine as tables on a virtual clock: every transition, the
growth of ejections, the half-open ramp, and cooldowns from retry-after / retry-after-ms."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import (
    InvalidRequest,
    Overloaded,
    RateLimited,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    UpstreamUnreachable,
)
from gateway.providers.retry_after import retry_after_seconds
from gateway.resilience.breaker import (
    Blocked,
    BreakerBoard,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    Verdict,
    is_breaker_failure,
    verdict,
)
from gateway.settings.server import BreakerSettings
from tests.resilience.fakes import FakeClock

# only the consecutive-failure rule, unless a test sets the error rate
CONSECUTIVE = BreakerConfig(
    failure_threshold=3,
    window_seconds=10.0,
    error_rate=1.0,
    min_requests=1000,
    open_seconds=5.0,
    max_open_seconds=12.0,
    half_open_probes=1,
    half_open_successes=3,
    cooldown_seconds=1.0,
    max_cooldown_seconds=30.0,
)


def make(config: BreakerConfig = CONSECUTIVE) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker("openai-main", config, clock=clock), clock


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        assert breaker.allow()
        breaker.record_failure()


def play(breaker: CircuitBreaker, clock: FakeClock, step: str) -> object:
    """One step of a scenario table: `fail`, `ok`, `allow`, `release`, `wait N`."""
    if step.startswith("wait "):
        clock.advance(float(step.split()[1]))
        return None
    if step == "allow":
        return breaker.allow()
    if step == "fail":
        breaker.record_failure()
    elif step == "ok":
        breaker.record_success()
    elif step == "release":
        breaker.release()
    else:
        raise AssertionError(f"unknown step {step!r}")
    return None


# --- what counts -----------------------------------------------------------------------

VERDICTS: list[tuple[BaseException | None, Verdict]] = [
    (None, "healthy"),
    (UpstreamUnavailable("500", provider="p", upstream_status=500), "failure"),
    (UpstreamUnavailable("503", provider="p", upstream_status=503), "failure"),
    (UpstreamUnavailable("stream broke", provider="p"), "failure"),
    (UpstreamUnreachable("connection refused", provider="p"), "failure"),
    (UpstreamTimeout("slow", provider="p"), "failure"),
    (UpstreamRejected("408 from upstream", status=504, provider="p", retryable=True), "failure"),
    (UpstreamMisconfigured("bad key", provider="p", upstream_status=401), "failure"),
    (ConnectionResetError(), "failure"),
    (TimeoutError(), "failure"),
    (UpstreamRejected("busy", status=429, provider="p", retryable=True), "backpressure"),
    # Anthropic's overloaded_error
    (UpstreamUnavailable("overloaded", provider="p", upstream_status=529), "backpressure"),
    (UpstreamRejected("bad", status=400, provider="p"), "neutral"),
    (UpstreamRejected("too long", status=413, provider="p"), "neutral"),
    (UpstreamRejected("no such model", status=404, provider="p"), "neutral"),
    (InvalidRequest("bad json"), "neutral"),
    (RateLimited("bucket empty"), "neutral"),
    (Overloaded("gpu queue full"), "neutral"),
    (ValueError("our own bug"), "neutral"),
]


@pytest.mark.parametrize(("error", "expected"), VERDICTS)
def test_only_ill_health_is_a_failure_and_429_is_back_pressure(
    error: BaseException | None, expected: Verdict
) -> None:
    assert verdict(error) == expected
    if error is not None:
        assert is_breaker_failure(error) == (expected == "failure")


# --- every transition ------------------------------------------------------------------

# (step, what the step returns (allow) or None, the state after it)
TRANSITIONS: dict[str, list[tuple[str, object, BreakerState]]] = {
    "closed stays closed below the threshold": [
        ("fail", None, "closed"),
        ("fail", None, "closed"),
        ("allow", True, "closed"),
    ],
    "a success resets the consecutive count": [
        ("fail", None, "closed"),
        ("fail", None, "closed"),
        ("ok", None, "closed"),
        ("fail", None, "closed"),
        ("fail", None, "closed"),
    ],
    "closed -> open after N consecutive failures, which refuses": [
        ("fail", None, "closed"),
        ("fail", None, "closed"),
        ("fail", None, "open"),
        ("allow", False, "open"),
    ],
    "open -> half_open after open_seconds": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("wait 4.9", None, "open"),
        ("wait 0.1", None, "half_open"),
    ],
    "outcomes of requests admitted before opening are ignored while open": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("ok", None, "open"),
        ("fail", None, "open"),
        ("wait 5", None, "half_open"),
    ],
    "half_open -> closed after half_open_successes trials": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("wait 5", None, "half_open"),
        ("allow", True, "half_open"),
        ("ok", None, "half_open"),
        ("allow", True, "half_open"),
        ("ok", None, "half_open"),
        ("allow", True, "half_open"),
        ("ok", None, "closed"),
        ("allow", True, "closed"),
    ],
    "half_open -> open when a trial fails": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("wait 5", None, "half_open"),
        ("allow", True, "half_open"),
        ("fail", None, "open"),
        ("allow", False, "open"),
    ],
    "a success that held no trial slot does not move half_open": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("wait 5", None, "half_open"),
        ("ok", None, "half_open"),
        ("ok", None, "half_open"),
        ("ok", None, "half_open"),
    ],
    "a released trial frees its slot": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("wait 5", None, "half_open"),
        ("allow", True, "half_open"),
        ("allow", False, "half_open"),
        ("release", None, "half_open"),
        ("allow", True, "half_open"),
    ],
    "a lost trial frees its slot after open_seconds": [
        *[("fail", None, "closed")] * 2,
        ("fail", None, "open"),
        ("wait 5", None, "half_open"),
        ("allow", True, "half_open"),
        ("wait 4.9", None, "half_open"),
        ("allow", False, "half_open"),
        ("wait 0.1", None, "half_open"),
        ("allow", True, "half_open"),
    ],
}


@pytest.mark.parametrize("name", list(TRANSITIONS))
def test_transition_table(name: str) -> None:
    breaker, clock = make()
    for number, (step, returns, state) in enumerate(TRANSITIONS[name], 1):
        assert play(breaker, clock, step) == returns, f"step {number}: {step}"
        assert breaker.state == state, f"step {number}: {step}"


def test_transitions_are_reported_in_order() -> None:
    seen: list[tuple[str, BreakerState, BreakerState]] = []
    clock = FakeClock()
    breaker = CircuitBreaker(
        "gpu@10.0.0.1", CONSECUTIVE, clock=clock, on_transition=lambda *t: seen.append(t)
    )
    fail(breaker, 3)
    clock.advance(5.0)
    for _ in range(3):
        assert breaker.allow()
        breaker.record_success()
    assert seen == [
        ("gpu@10.0.0.1", "closed", "open"),
        ("gpu@10.0.0.1", "open", "half_open"),
        ("gpu@10.0.0.1", "half_open", "closed"),
    ]


# --- ejection growth -------------------------------------------------------------------


def eject_again(breaker: CircuitBreaker, clock: FakeClock) -> float:
    """Wait out the ejection, fail the trial: returns how long the next one lasts."""
    clock.advance(breaker.retry_in)
    assert breaker.state == "half_open"
    assert breaker.allow()
    breaker.record_failure()
    return breaker.retry_in


def test_consecutive_ejections_last_base_times_n_up_to_the_cap() -> None:
    breaker, clock = make()  # base 5 s, cap 12 s
    fail(breaker, 3)
    lengths = [breaker.retry_in] + [eject_again(breaker, clock) for _ in range(3)]
    assert lengths == [5.0, 10.0, 12.0, 12.0]
    assert breaker.ejections == 4


# (seconds spent closed after a 3rd ejection healed, length of the next ejection)
DECAY = [(0.0, 12.0), (4.9, 12.0), (5.0, 12.0), (10.0, 10.0), (15.0, 5.0), (60.0, 5.0)]


@pytest.mark.parametrize(("closed_for", "next_length"), DECAY)
def test_time_spent_closed_forgives_one_ejection_per_open_seconds(
    closed_for: float, next_length: float
) -> None:
    breaker, clock = make()
    fail(breaker, 3)
    eject_again(breaker, clock)
    eject_again(breaker, clock)  # the 3rd ejection
    clock.advance(breaker.retry_in)
    for _ in range(3):
        assert breaker.allow()
        breaker.record_success()
    assert breaker.state == "closed"
    clock.advance(closed_for)
    fail(breaker, 3)
    assert breaker.retry_in == next_length


# --- the half-open ramp ----------------------------------------------------------------


def test_half_open_trial_slots_double_with_every_success_then_close() -> None:
    config = dataclasses.replace(CONSECUTIVE, half_open_probes=2, half_open_successes=4)
    breaker, clock = make(config)
    fail(breaker, 3)
    clock.advance(5.0)
    admitted: list[int] = []
    for _ in range(3):
        taken = 0
        while breaker.allow():
            taken += 1
        admitted.append(taken)
        breaker.record_success()  # one trial answers; the others go away without a verdict
        for _ in range(taken - 1):
            breaker.release()
    assert admitted == [2, 4, 8]
    assert breaker.probe_slots == 16
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed"


def test_probe_slots_follow_successes() -> None:
    config = dataclasses.replace(CONSECUTIVE, half_open_probes=3)
    assert [config.probe_slots(n) for n in range(5)] == [3, 6, 12, 24, 48]
    assert config.probe_slots(10_000) == 3 << 30  # capped, no overflow


# --- cooldowns -------------------------------------------------------------------------

# (response headers of the 429, seconds the deployment cools down)
COOLDOWNS: list[tuple[dict[str, str], float]] = [
    ({"retry-after": "2"}, 2.0),
    ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
    ({}, 1.0),  # no hint: cooldown_seconds
    ({"retry-after": "soon"}, 1.0),
    ({"retry-after": "0"}, 0.0),
    ({"retry-after": "3600"}, 30.0),  # capped at max_cooldown_seconds
]


@pytest.mark.parametrize(("headers", "seconds"), COOLDOWNS)
def test_a_429_cools_down_for_the_time_its_retry_after_asked(
    headers: dict[str, str], seconds: float
) -> None:
    breaker, clock = make()
    began = breaker.cool_down(retry_after_seconds(headers))
    assert began == (seconds > 0)
    if seconds > 0:
        assert breaker.blocked() == Blocked("cooldown", clock(), clock() + seconds)
    clock.advance(seconds - 0.001 if seconds > 0 else 0)
    assert (breaker.blocked() is not None) == (seconds > 0)
    clock.advance(0.001)
    assert breaker.blocked() is None
    # back-pressure never touches the circuit
    assert breaker.state == "closed"
    assert breaker.allow()


def test_a_longer_cooldown_is_never_shortened_and_only_a_new_one_is_reported() -> None:
    breaker, clock = make()
    assert breaker.cool_down(5.0)
    clock.advance(1.0)
    assert not breaker.cool_down(1.0)
    blocked = breaker.blocked()
    assert blocked is not None and blocked.until == clock() + 4.0
    assert blocked.since == clock() - 1.0


def test_an_open_circuit_is_reported_before_a_cooldown_with_when_it_opened() -> None:
    breaker, clock = make()
    breaker.cool_down(60.0)
    opened = clock()
    fail(breaker, 3)
    clock.advance(1.0)
    assert breaker.blocked() == Blocked("circuit_open", opened, opened + 5.0)


def test_a_half_open_breaker_with_free_slots_blocks_nothing() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.blocked() is None
    assert breaker.allow()
    blocked = breaker.blocked()
    assert blocked is not None and blocked.reason == "circuit_open"


# --- the error rate --------------------------------------------------------------------


def rate_config(min_requests: int = 10) -> BreakerConfig:
    return dataclasses.replace(
        CONSECUTIVE, failure_threshold=1000, error_rate=0.5, min_requests=min_requests
    )


def alternate(breaker: CircuitBreaker, pairs: int) -> None:
    for _ in range(pairs):
        breaker.record_failure()
        breaker.record_success()


def test_error_rate_does_not_open_below_min_requests() -> None:
    breaker, _ = make(rate_config(min_requests=10))
    alternate(breaker, 4)  # 8 requests at 50%
    assert breaker.state == "closed"


def test_error_rate_opens_once_min_requests_is_reached() -> None:
    breaker, _ = make(rate_config(min_requests=10))
    alternate(breaker, 4)
    breaker.record_success()
    breaker.record_failure()  # 10 requests, 5 failures
    assert breaker.state == "open"


def test_old_outcomes_slide_out_of_the_window() -> None:
    breaker, clock = make(rate_config(min_requests=10))
    alternate(breaker, 4)
    clock.advance(11.0)
    breaker.record_failure()
    breaker.record_success()
    assert breaker.state == "closed"


# --- config ----------------------------------------------------------------------------


def test_config_converts_from_server_settings() -> None:
    settings = BreakerSettings(
        failure_threshold=2,
        window_seconds=5,
        error_rate=0.25,
        min_requests=4,
        open_seconds=3,
        max_open_seconds=30,
        half_open_probes=2,
        half_open_successes=5,
        cooldown_seconds=0.5,
        max_cooldown_seconds=9,
        shared=True,
    )
    assert BreakerConfig.from_settings(settings) == BreakerConfig(
        2, 5.0, 0.25, 4, 3.0, 30.0, 2, 5, 0.5, 9.0, shared=True
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"error_rate": 1.5}, "error_rate"),
        ({"max_open_seconds": 1.0}, "max_open_seconds"),
        ({"half_open_successes": 0}, "half_open_successes"),
        ({"cooldown_seconds": 90.0}, "cooldown_seconds"),
    ],
)
def test_config_refuses_nonsense(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(CONSECUTIVE, **fields)


# --- the board -------------------------------------------------------------------------


def test_board_keeps_one_breaker_per_name() -> None:
    board = BreakerBoard(CONSECUTIVE, clock=FakeClock())
    assert board.get("a") is board.get("a")
    assert board.get("a") is not board.get("b")
    assert len(board) == 2


def test_board_applies_new_config_and_keeps_state() -> None:
    board = BreakerBoard(CONSECUTIVE, clock=FakeClock())
    fail(board.get("a"), 3)
    looser = dataclasses.replace(CONSECUTIVE, failure_threshold=10)
    breaker = board.get("a", looser)
    assert breaker.config == looser
    assert breaker.state == "open"
    assert board.states() == {"a": "open"}


# --- invariants under any sequence -----------------------------------------------------

steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(0.0, 8.0)),
        st.tuples(st.sampled_from(["allow", "success", "failure", "release"]), st.just(0.0)),
    ),
    max_size=80,
)


@given(steps=steps, probes=st.integers(1, 3), threshold=st.integers(1, 4))
def test_breaker_invariants_hold_for_any_sequence(
    steps: list[tuple[str, float]], probes: int, threshold: int
) -> None:
    config = dataclasses.replace(CONSECUTIVE, failure_threshold=threshold, half_open_probes=probes)
    breaker, clock = make(config)
    opened_at: float | None = None
    consecutive = 0
    for action, amount in steps:
        before = breaker.state
        if action == "advance":
            clock.advance(amount)
        elif action == "allow":
            allowed = breaker.allow()
            assert allowed == (before == "closed") or before == "half_open"
            if before == "closed":
                assert allowed
        elif action == "success":
            breaker.record_success()
            consecutive = 0
        elif action == "failure":
            breaker.record_failure()
            if before == "closed":
                consecutive += 1
                if consecutive >= threshold:
                    assert breaker.state == "open"
            if before == "half_open":
                assert breaker.state == "open"
        else:
            breaker.release()
        after = breaker.state
        if after == "open" and before != "open":
            opened_at = clock()
            consecutive = 0
        if after == "open":
            # open never outlasts the cap
            assert opened_at is not None
            assert clock() < opened_at + config.max_open_seconds
            assert breaker.retry_in <= config.max_open_seconds
        if before == "open":
            assert after in ("open", "half_open")
        assert breaker.ejections >= 1 or opened_at is None
