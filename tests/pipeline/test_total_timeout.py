"""A provider's `timeouts.total` cuts an attempt off with a 504-class UpstreamTimeout; a
cancellation from elsewhere (a client that left) stays a cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.errors import UpstreamTimeout
from gateway.pipeline.dispatch import _within
from gateway.pipeline.running_task import TaskFinder
from gateway.resilience.deadline import Deadline, TotalWatch


async def _answer_after(seconds: float, value: str = "answer") -> str:
    await asyncio.sleep(seconds)
    return value


def test_an_attempt_past_the_total_is_an_upstream_timeout() -> None:
    async def run() -> None:
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as caught:
            await _within(
                Deadline.starting_now(0.05),
                "slowpoke",
                _answer_after(5),
                TaskFinder(),
                TotalWatch(0.05),
            )
        assert time.monotonic() - started < 1
        assert "slowpoke" in caught.value.message and "0.05s" in caught.value.message
        # the task is not left cancelled: it goes on serving
        await asyncio.sleep(0.01)

    asyncio.run(run())


def test_an_attempt_within_the_total_answers_and_leaves_no_timer() -> None:
    async def run() -> None:
        assert (
            await _within(
                Deadline.starting_now(0.05), "p", _answer_after(0.0), TaskFinder(), TotalWatch(0.05)
            )
            == "answer"
        )
        await asyncio.sleep(0.1)  # past the deadline: nothing fires into this task

    asyncio.run(run())


def test_an_exhausted_total_cuts_off_at_the_first_wait() -> None:
    async def run() -> None:
        spent = Deadline(start=time.monotonic() - 10, budget=1)
        with pytest.raises(UpstreamTimeout):
            await _within(spent, "p", _answer_after(5), TaskFinder(), TotalWatch(1))

    asyncio.run(run())


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def run() -> None:
        attempt = asyncio.ensure_future(
            _within(Deadline.starting_now(5), "p", _answer_after(5), TaskFinder(), TotalWatch(5))
        )
        await asyncio.sleep(0.01)
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt

    asyncio.run(run())


def test_the_attempts_own_timeout_error_is_not_taken_for_the_total() -> None:
    async def own_timeout() -> str:
        raise TimeoutError("the attempt's own")

    async def run() -> None:
        with pytest.raises(TimeoutError, match="the attempt's own"):
            await _within(Deadline.starting_now(5), "p", own_timeout(), TaskFinder(), TotalWatch(5))

    asyncio.run(run())


def test_one_watch_cuts_each_attempt_between_its_deadline_and_one_period_after() -> None:
    """Attempts of one budget, started apart, each cut within an eighth of the budget
    after its own deadline; one that answers in time is not cut, and the sweep stops
    once nothing is watched."""
    budget = 0.4
    watch = TotalWatch(budget)

    async def one(delay: float, answer_after: float) -> tuple[str, float]:
        await asyncio.sleep(delay)
        started = time.monotonic()
        try:
            got = await _within(
                Deadline.starting_now(budget), "p", _answer_after(answer_after), TaskFinder(), watch
            )
        except UpstreamTimeout:
            return "cut", time.monotonic() - started
        return got, time.monotonic() - started

    async def run() -> list[tuple[str, float]]:
        results = await asyncio.gather(one(0, 5), one(0.13, 5), one(0.05, 0.1))
        assert not watch.watched
        await asyncio.sleep(budget / 8 * 2)
        assert watch._timer is None  # the sweep stopped with nothing to watch
        return results

    (first, first_took), (second, second_took), (third, _) = asyncio.run(run())
    assert (first, second, third) == ("cut", "cut", "answer")
    for took in (first_took, second_took):
        assert budget <= took < budget * 1.125 + 0.05


def test_a_watch_outlives_its_event_loop() -> None:
    """The same watch (a dispatcher's) cuts attempts on a later loop after the loop it
    armed its sweep on ended before the sweep ran, as a test or a restarted server does."""
    watch = TotalWatch(0.05)

    async def answered() -> None:
        await _within(Deadline.starting_now(0.05), "p", _answer_after(0), TaskFinder(), watch)

    async def cut() -> None:
        with pytest.raises(UpstreamTimeout):
            await _within(Deadline.starting_now(0.05), "p", _answer_after(5), TaskFinder(), watch)

    asyncio.run(answered())  # ends with the sweep still armed on this loop
    asyncio.run(asyncio.wait_for(cut(), 2))


def test_an_exhausted_total_over_before_its_turn_cancels_nothing() -> None:
    """A cutoff already due goes at the loop's next turn; an attempt over by then (it
    never waited) leaves its task uncancelled."""

    async def instant() -> str:
        return "answer"

    async def run() -> None:
        spent = Deadline(start=time.monotonic() - 10, budget=1)
        assert await _within(spent, "p", instant(), TaskFinder(), TotalWatch(1)) == "answer"
        await asyncio.sleep(0.01)  # a stray cancel would land here

    asyncio.run(run())
