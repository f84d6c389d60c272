from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import (
    InvalidRequest,
    RateLimited,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.resilience.breaker import (
    BreakerBoard,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    is_breaker_failure,
)
from gateway.settings.server import BreakerSettings
from tests.resilience.fakes import FakeClock

# only the consecutive-failure rule, unless a test sets the error rate
CONSECUTIVE = BreakerConfig(
    failure_threshold=3, window_seconds=10.0, error_rate=1.0, min_requests=1000,
    open_seconds=5.0, half_open_probes=1,
)


def make(config: BreakerConfig = CONSECUTIVE) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker("openai-main", config, clock=clock), clock


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        assert breaker.allow()
        breaker.record_failure()


def test_new_breaker_is_closed_and_allows() -> None:
    breaker, _ = make()
    assert breaker.state == "closed"
    assert breaker.allow()


def test_opens_after_n_consecutive_failures() -> None:
    breaker, _ = make()
    fail(breaker, 2)
    assert breaker.state == "closed"
    fail(breaker, 1)
    assert breaker.state == "open"
    assert not breaker.allow()


def test_a_success_resets_the_consecutive_count() -> None:
    breaker, _ = make()
    fail(breaker, 2)
    breaker.record_success()
    fail(breaker, 2)
    assert breaker.state == "closed"


def test_stays_open_for_open_seconds_then_turns_half_open() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    clock.advance(4.9)
    assert breaker.state == "open"
    assert breaker.retry_in == pytest.approx(0.1)
    clock.advance(0.1)
    assert breaker.state == "half_open"
    assert breaker.retry_in == 0.0


def test_half_open_lets_only_the_configured_number_of_probes_through() -> None:
    breaker, clock = make(dataclasses.replace(CONSECUTIVE, half_open_probes=2))
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.allow()
    assert breaker.allow()
    assert not breaker.allow()
    assert not breaker.would_allow()


def test_half_open_success_closes() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed"
    assert breaker.allow()


def test_half_open_failure_reopens_for_another_open_period() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    clock.advance(4.0)
    assert not breaker.allow()
    clock.advance(1.0)
    assert breaker.state == "half_open"


def test_released_probe_frees_its_slot() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.allow()
    assert not breaker.allow()
    breaker.release()
    assert breaker.allow()


def test_lost_probe_frees_its_slot_after_open_seconds() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.allow()
    clock.advance(4.0)
    assert not breaker.allow()
    clock.advance(1.0)
    assert breaker.allow()


def test_outcomes_of_requests_started_before_opening_are_ignored_while_open() -> None:
    breaker, clock = make()
    fail(breaker, 3)
    breaker.record_success()
    assert breaker.state == "open"
    clock.advance(5.0)
    assert breaker.state == "half_open"


def rate_config(min_requests: int = 10) -> BreakerConfig:
    return BreakerConfig(
        failure_threshold=1000, window_seconds=10.0, error_rate=0.5,
        min_requests=min_requests, open_seconds=5.0, half_open_probes=1,
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


def test_error_rate_below_the_threshold_stays_closed() -> None:
    breaker, _ = make(rate_config(min_requests=10))
    for _ in range(10):
        breaker.record_failure()
        breaker.record_success()
        breaker.record_success()
    assert breaker.state == "closed"


def test_old_outcomes_slide_out_of_the_window() -> None:
    breaker, clock = make(rate_config(min_requests=10))
    alternate(breaker, 4)
    clock.advance(11.0)
    breaker.record_failure()
    breaker.record_success()
    assert breaker.state == "closed"


def test_transitions_are_reported() -> None:
    seen: list[tuple[str, BreakerState, BreakerState]] = []
    clock = FakeClock()
    breaker = CircuitBreaker("gpu@10.0.0.1", CONSECUTIVE, clock=clock, on_transition=lambda *t:
                             seen.append(t))
    fail(breaker, 3)
    clock.advance(5.0)
    assert breaker.allow()
    breaker.record_success()
    assert seen == [
        ("gpu@10.0.0.1", "closed", "open"),
        ("gpu@10.0.0.1", "open", "half_open"),
        ("gpu@10.0.0.1", "half_open", "closed"),
    ]


def test_config_converts_from_server_settings() -> None:
    settings = BreakerSettings(failure_threshold=2, window_seconds=5, error_rate=0.25,
                               min_requests=4, open_seconds=3, half_open_probes=2, shared=True)
    assert BreakerConfig.from_settings(settings) == BreakerConfig(2, 5.0, 0.25, 4, 3.0, 2)


def test_config_refuses_an_error_rate_above_one() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        BreakerConfig(error_rate=1.5)


def test_upstream_faults_count_against_the_breaker_and_client_faults_do_not() -> None:
    assert is_breaker_failure(UpstreamUnavailable("down", provider="p"))
    assert is_breaker_failure(UpstreamTimeout("slow", provider="p"))
    assert is_breaker_failure(UpstreamMisconfigured("bad key", provider="p"))
    assert is_breaker_failure(UpstreamRejected("busy", status=429, provider="p"))
    assert is_breaker_failure(ConnectionResetError())
    assert not is_breaker_failure(UpstreamRejected("bad", status=400, provider="p"))
    assert not is_breaker_failure(InvalidRequest("bad json"))
    assert not is_breaker_failure(RateLimited("bucket empty"))


# --- the board -------------------------------------------------------------------------


def test_board_keeps_one_breaker_per_name() -> None:
    board = BreakerBoard(CONSECUTIVE, clock=FakeClock())
    assert board.get("a") is board.get("a")
    assert board.get("a") is not board.get("b")
    assert len(board) == 2


def test_board_lists_open_breakers_for_the_planner_without_taking_probes() -> None:
    clock = FakeClock()
    board = BreakerBoard(CONSECUTIVE, clock=clock)
    board.get("healthy").record_success()
    fail(board.get("broken"), 3)
    assert board.unavailable() == {"broken"}
    assert board.states() == {"healthy": "closed", "broken": "open"}
    clock.advance(5.0)
    assert board.unavailable() == frozenset()
    assert board.unavailable() == frozenset()  # looking twice takes no trial slot
    assert board.get("broken").allow()
    assert board.unavailable() == {"broken"}


def test_board_applies_new_config_and_keeps_state() -> None:
    board = BreakerBoard(CONSECUTIVE, clock=FakeClock())
    fail(board.get("a"), 3)
    looser = BreakerConfig(failure_threshold=10, open_seconds=5.0)
    breaker = board.get("a", looser)
    assert breaker.config == looser
    assert breaker.state == "open"


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
    config = BreakerConfig(
        failure_threshold=threshold, window_seconds=10.0, error_rate=0.5,
        min_requests=6, open_seconds=5.0, half_open_probes=probes,
    )
    breaker, clock = make(config)
    opened_at: float | None = None
    consecutive = 0
    # grant times of trial requests not yet answered, released or lost
    trials: list[float] = []
    for action, amount in steps:
        before = breaker.state
        if before != "half_open":
            trials.clear()
        trials = [t for t in trials if t > clock() - config.open_seconds]
        if action == "advance":
            clock.advance(amount)
        elif action == "allow":
            allowed = breaker.allow()
            trial_free = before == "half_open" and len(trials) < probes
            assert allowed == (before == "closed" or trial_free)
            if before == "half_open" and allowed:
                trials.append(clock())
        elif action == "success":
            breaker.record_success()
            consecutive = 0
            if before == "half_open":
                assert breaker.state == "closed"
        elif action == "failure":
            breaker.record_failure()
            if before == "closed":
                consecutive += 1
                if consecutive >= threshold:
                    assert breaker.state == "open"
            if before == "half_open":
                assert breaker.state == "open"
        elif trials:
            breaker.release()
            trials.pop(0)
        after = breaker.state
        if after == "open" and before != "open":
            opened_at = clock()
            consecutive = 0
        if after == "open":
            # open never outlasts open_seconds
            assert opened_at is not None
            assert clock() < opened_at + config.open_seconds
        if before == "open":
            assert after in ("open", "half_open")
