"""Fault injection for resilience tests: failures, slow starts, a crash after N answers."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable

from gateway.emulator.options import EmulatorOptions

CRASH_EXIT_STATUS = 3
# lets the last answer's bytes leave the socket before the process dies
CRASH_DELAY_SECONDS = 0.02


def _exit_now() -> None:
    os._exit(CRASH_EXIT_STATUS)


class Faults:
    """Decides, per chat completion, whether to fail it; counts answers towards a crash."""

    def __init__(self, options: EmulatorOptions, crash: Callable[[], None] = _exit_now) -> None:
        self.fail_rate = options.fail_rate
        self.fail_status = options.fail_status
        self.slow_start = options.slow_start_ms / 1000.0
        self._crash_after = options.crash_after
        self._crash = crash
        self._answered = 0
        self._rng = random.Random(options.seed)

    def should_fail(self) -> bool:
        return self.fail_rate > 0 and self._rng.random() < self.fail_rate

    def answered(self) -> None:
        """Count one answered chat completion; the N-th schedules the crash."""
        self._answered += 1
        if self._crash_after is not None and self._answered == self._crash_after:
            asyncio.get_running_loop().call_later(CRASH_DELAY_SECONDS, self._crash)
