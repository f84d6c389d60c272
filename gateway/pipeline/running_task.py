"""The task running the caller, found without a system call.

On Python 3.11 `asyncio.current_task()` and `asyncio.get_running_loop()` each ask the
kernel for the process id (a `getpid` system call, to notice a loop inherited over
fork); a request asked once per upstream attempt for its own task. `current_task(loop)`
with the loop given is a dictionary look-up, so the loop is asked for once and kept.

The kept loop is trusted only on the thread that asked for it, and only while it has a
task running: a stopped loop (a test's earlier one) has none, and a thread runs one loop
at a time, so a task found that way is the caller's, as asyncio's own look-up would say.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class TaskFinder:
    """`current()` is `asyncio.current_task()` without the loop look-up after the first."""

    __slots__ = ("_loop", "_thread")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0

    def current(self) -> asyncio.Task[Any]:
        """The running task; RuntimeError outside one (as asyncio.current_task())."""
        loop = self._loop
        if loop is not None and self._thread == threading.get_ident():
            task = asyncio.current_task(loop)
            if task is not None:
                return task
        loop = asyncio.get_running_loop()
        found = asyncio.current_task(loop)
        if found is None:
            raise RuntimeError("no task is running")
        self._loop, self._thread = loop, threading.get_ident()
        return found
