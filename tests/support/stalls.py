"""How long this process went unscheduled, to tell a slow call from a busy machine.

A bound such as "nothing waits past the timeout" is about what the code waits for; on a
shared 2-core machine running xdist's workers, mypy and ruff side by side, the process
itself can sit unscheduled for hundreds of milliseconds, and every call in flight then
looks that much slower. :class:`StallWatch` measures it from a thread of its own that
sleeps a few milliseconds at a time and keeps the longest overshoot. The thread sleeps
outside the GIL, so an event loop blocked in a system call (a synchronous connect, say)
is not counted, nor is Python code hogging the loop (the GIL changes hands every 5 ms):
what is counted is the process going unscheduled, plus a long call into C that holds the
GIL throughout.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

TICK_SECONDS = 0.005


class StallWatch:
    """`with StallWatch() as stalls: ...` then `stalls.longest`: the longest time, in
    seconds, the watching thread woke late by while the block ran."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(TICK_SECONDS)
            late = time.monotonic() - before - TICK_SECONDS
            self.longest = max(self.longest, late)
