"""A provider's `timeouts.total` cuts an attempt off with a 504-class UpstreamTimeout; a
cancellation from elsewhere (a client that left) stays a cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.errors import UpstreamTimeout
from gateway.pipeline.dispatch import _within
from gateway.pipeline.running_task import TaskFinder
from gateway.resilience.deadline import Deadline


async def _answer_after(seconds: float, value: str = "answer") -> str:
    await asyncio.sleep(seconds)
    return value


def test_an_attempt_past_the_total_is_an_upstream_timeout() -> None:
    async def run() -> None:
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as caught:
            await _within(Deadline.starting_now(0.05), "slowpoke", _answer_after(5), TaskFinder())
        assert time.monotonic() - started < 1
        assert "slowpoke" in caught.value.message and "0.05s" in caught.value.message
        # the task is not left cancelled: it goes on serving
        await asyncio.sleep(0.01)

    asyncio.run(run())


def test_an_attempt_within_the_total_answers_and_leaves_no_timer() -> None:
    async def run() -> None:
        assert (
            await _within(Deadline.starting_now(0.05), "p", _answer_after(0.0), TaskFinder())
            == "answer"
        )
        await asyncio.sleep(0.1)  # past the deadline: nothing fires into this task

    asyncio.run(run())


def test_an_exhausted_total_cuts_off_at_the_first_wait() -> None:
    async def run() -> None:
        spent = Deadline(start=time.monotonic() - 10, budget=1)
        with pytest.raises(UpstreamTimeout):
            await _within(spent, "p", _answer_after(5), TaskFinder())

    asyncio.run(run())


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def run() -> None:
        attempt = asyncio.ensure_future(
            _within(Deadline.starting_now(5), "p", _answer_after(5), TaskFinder())
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
            await _within(Deadline.starting_now(5), "p", own_timeout(), TaskFinder())

    asyncio.run(run())
