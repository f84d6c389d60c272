"""A total time budget for one request, measured on a monotonic clock."""

from __future__ import annotations

import time
from collections.abc import Callable

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
