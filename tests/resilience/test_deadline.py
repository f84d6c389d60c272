from __future__ import annotations

from gateway.resilience.deadline import Deadline
from tests.resilience.fakes import FakeClock


def test_remaining_counts_down_and_never_goes_negative() -> None:
    clock = FakeClock(start=50.0)
    deadline = Deadline.starting_now(10.0, clock)
    assert deadline.remaining(clock()) == 10.0
    clock.advance(4.0)
    assert deadline.remaining(clock()) == 6.0
    assert deadline.elapsed(clock()) == 4.0
    assert not deadline.expired(clock())
    clock.advance(7.0)
    assert deadline.remaining(clock()) == 0.0
    assert deadline.expired(clock())
    assert deadline.expires_at == 60.0
