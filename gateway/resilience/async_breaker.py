"""One async breaker interface, so the dispatcher has one code path whether breakers
are local (:mod:`breaker`) or shared through Redis (:mod:`shared_breaker`)."""

from __future__ import annotations

from typing import Protocol

from gateway.resilience.breaker import (
    Blocked,
    BreakerBoard,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    Verdict,
)


class AsyncBreaker(Protocol):
    @property
    def state(self) -> BreakerState: ...

    def blocked(self) -> Blocked | None:
        """From what this process knows now, without a round trip."""
        ...

    def cool_down(self, hint: float | None) -> bool: ...

    async def allow(self) -> bool: ...

    async def record(self, outcome: Verdict) -> None: ...


class AsyncBreakerBoard(Protocol):
    def get(self, name: str, config: BreakerConfig | None = None) -> AsyncBreaker: ...

    def states(self) -> dict[str, BreakerState]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class AsyncLocalBreaker:
    """A local :class:`CircuitBreaker` behind the async interface."""

    def __init__(self, breaker: CircuitBreaker) -> None:
        self.breaker = breaker

    @property
    def state(self) -> BreakerState:
        return self.breaker.state

    def blocked(self) -> Blocked | None:
        return self.breaker.blocked()

    def cool_down(self, hint: float | None) -> bool:
        return self.breaker.cool_down(hint)

    async def allow(self) -> bool:
        return self.breaker.allow()

    async def record(self, outcome: Verdict) -> None:
        self.breaker.record(outcome)


class AsyncLocalBreakerBoard:
    """A :class:`BreakerBoard` behind the async interface."""

    def __init__(self, board: BreakerBoard) -> None:
        self.board = board
        self._wrapped: dict[str, AsyncLocalBreaker] = {}

    def get(self, name: str, config: BreakerConfig | None = None) -> AsyncLocalBreaker:
        breaker = self.board.get(name, config)
        wrapped = self._wrapped.get(name)
        if wrapped is None or wrapped.breaker is not breaker:
            wrapped = self._wrapped[name] = AsyncLocalBreaker(breaker)
        return wrapped

    def states(self) -> dict[str, BreakerState]:
        return self.board.states()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
