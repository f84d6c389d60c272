"""The asyncio side of the scheduler: one task steps it and paces it to wall time.

The engine keeps the emulated GPU clock. Each step advances it by the step's duration;
the task then sleeps until the wall clock catches up (`duration * time_scale`). Sleeping
until a deadline rather than for a duration makes up for timer granularity: when a
sleep overshoots, the next steps run back to back until the clock is level again, so
throughput stays right at small time scales. If the process falls further behind than
`MAX_LAG_SECONDS` of wall time (CPU saturated), the GPU clock jumps forward instead of
bursting, as if the GPU had stalled.

Request handlers hold a `Ticket`: they await `changed()` and read the sequence's
`output_tokens`, so a handler that wakes late sends all tokens produced since in one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from gateway.emulator.scheduler import Scheduler, Sequence

MAX_LAG_SECONDS = 0.05

logger = logging.getLogger(__name__)


class EngineFailed(RuntimeError):
    """The scheduler loop raised; the emulator can no longer serve completions."""


class Ticket:
    """A handler's view of one sequence: a wake-up each time it makes progress."""

    __slots__ = ("_pending", "_waiter", "disconnected", "every_token", "failed", "seq")

    def __init__(self, seq: Sequence, every_token: bool) -> None:
        self.seq = seq
        # a non-streaming handler only needs waking when its sequence ends
        self.every_token = every_token
        self.disconnected = False
        # the engine died: the handler answers with an error instead of waiting forever
        self.failed = False
        self._pending = False
        self._waiter: asyncio.Future[None] | None = None

    def notify(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            self._waiter = None
        else:
            self._pending = True

    def changed(self) -> asyncio.Future[None]:
        """A future done at the next progress, or already done if some is unread."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._pending:
            self._pending = False
            future.set_result(None)
        else:
            self._waiter = future
        return future


class Engine:
    def __init__(
        self,
        scheduler: Scheduler,
        time_scale: float,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("the engine needs a positive time scale")
        self.scheduler = scheduler
        self._scale = time_scale
        self._wall = wall
        self._wall_origin = wall()
        self._clock = 0.0
        self._tickets: dict[int, Ticket] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.failed = False

    def now(self) -> float:
        """Emulated seconds since the engine was built, from the wall clock."""
        return (self._wall() - self._wall_origin) / self._scale

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, seq: Sequence, every_token: bool = True) -> Ticket:
        """Queue a sequence (raises `PromptTooLong`, `EngineFailed`); arrival is stamped now."""
        if self.failed:
            raise EngineFailed("the emulator's scheduler loop has failed; see its log")
        self.start()
        seq.arrival = self.now()
        self.scheduler.submit(seq)
        ticket = Ticket(seq, every_token)
        self._tickets[seq.rid] = ticket
        assert self._wake is not None
        self._wake.set()
        return ticket

    def abort(self, ticket: Ticket) -> None:
        self.scheduler.abort(ticket.seq)
        self._tickets.pop(ticket.seq.rid, None)

    async def _run(self) -> None:
        try:
            await self._step_forever()
        except Exception:
            logger.exception("emulator scheduler loop failed")
            self.failed = True
            for ticket in self._tickets.values():
                ticket.failed = True
                ticket.notify()
            self._tickets.clear()

    async def _step_forever(self) -> None:
        scheduler = self.scheduler
        wake = self._wake
        assert wake is not None
        while True:
            if not scheduler.has_work:
                wake.clear()
                await wake.wait()
                self._clock = max(self._clock, self.now())
                continue
            result = scheduler.step(self._clock)
            if result.duration == 0:
                # queued work that cannot start (nothing running): wait for a change
                wake.clear()
                await wake.wait()
                continue
            self._clock = result.ended
            tickets = self._tickets
            for seq in result.emitted:
                ticket = tickets.get(seq.rid)
                if ticket is not None and ticket.every_token:
                    ticket.notify()
            for seq in result.finished:
                ticket = tickets.pop(seq.rid, None)
                if ticket is not None and not ticket.every_token:
                    ticket.notify()
            await self._pace()

    async def _pace(self) -> None:
        delay = self._wall_origin + self._clock * self._scale - self._wall()
        if delay > 0:
            await asyncio.sleep(delay)
            return
        if -delay > MAX_LAG_SECONDS:
            self._clock = self.now()
        # let the handlers run between back-to-back steps
        await asyncio.sleep(0)
