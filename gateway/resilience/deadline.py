"""A total time budget for one request, measured on a monotonic clock, and the sweep that
cuts off the attempts that outlive theirs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec

Clock = Callable[[], float]


class Deadline(msgspec.Struct, frozen=True):
    """`budget` seconds starting at `start`, both on the same monotonic clock."""

    start: float
    budget: float

    @classmethod
    def starting_now(cls, budget: float, clock: Clock = time.monotonic) -> Deadline:
        return cls(start=clock(), budget=budget)

    @property
    def expires_at(self) -> float:
        return self.start + self.budget

    def elapsed(self, now: float) -> float:
        return max(0.0, now - self.start)

    def remaining(self, now: float) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires_at - now)

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


class Cutoff:
    """One attempt under a TotalWatch: `expired` once the watch has cancelled its task;
    once `discard`ed (the attempt is over) it cancels nothing."""

    __slots__ = ("expired", "expires_at", "over", "task")

    def __init__(self, expires_at: float, task: asyncio.Task[Any]) -> None:
        self.expires_at = expires_at
        self.task = task
        self.expired = False
        self.over = False

    def expire(self) -> None:
        if not self.expired and not self.over:
            self.expired = True
            self.task.cancel()


class TotalWatch:
    """The attempts of one `timeouts.total` budget, cut off by one sweep instead of a loop
    timer each: uvloop's `call_later` and `cancel` make, start, stop and close a libuv
    timer for every attempt (~2% of the CPU at 256 requests in flight). The sweep runs
    every eighth of the budget, at most every second, and only while an attempt is
    watched: an attempt is cut between its deadline and one period after it. One already
    past its deadline is cut at the loop's next turn."""

    __slots__ = ("_loop", "_period", "_timer", "watched")

    def __init__(self, budget: float) -> None:
        self._period = min(max(budget / 8, 0.001), 1.0)
        self.watched: set[Cutoff] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, expires_at: float, task: asyncio.Task[Any]) -> Cutoff:
        cutoff = Cutoff(expires_at, task)
        loop = task.get_loop()
        if expires_at <= time.monotonic():
            loop.call_soon(cutoff.expire)
            return cutoff
        self.watched.add(cutoff)
        if self._timer is None or self._loop is not loop:
            # (a loop of its own for each run: a timer armed on one that ended never fires)
            self._loop = loop
            self._timer = loop.call_later(self._period, self._sweep)
        return cutoff

    def discard(self, cutoff: Cutoff) -> None:
        cutoff.over = True
        self.watched.discard(cutoff)

    def _sweep(self) -> None:
        self._timer = None
        if not self.watched or self._loop is None:
            return
        now = time.monotonic()
        for cutoff in [c for c in self.watched if c.expires_at <= now]:
            self.watched.discard(cutoff)
            cutoff.expire()
        if self.watched:
            self._timer = self._loop.call_later(self._period, self._sweep)
