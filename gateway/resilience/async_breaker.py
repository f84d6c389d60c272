"""One async breaker interface, so the dispatcher has one code path whether breakers
are local (:mod:`breaker`) or shared through Redis (:mod:`shared_breaker`)."""

from __future__ import annotations

from typing import Protocol

from gateway.resilience.breaker import BreakerBoard, BreakerConfig, BreakerState, CircuitBreaker


class AsyncBreaker(Protocol):
    @property
    def state(self) -> BreakerState: ...

    def would_allow(self) -> bool: ...

    async def allow(self) -> bool: ...

    async def record_success(self) -> None: ...

    async def record_failure(self) -> None: ...

    async def release(self) -> None: ...


class AsyncBreakerBoard(Protocol):
    def get(self, name: str, config: BreakerConfig | None = None) -> AsyncBreaker: ...

    def states(self) -> dict[str, BreakerState]: ...

    def unavailable(self) -> frozenset[str]: ...


class AsyncLocalBreaker:
    """A local :class:`CircuitBreaker` behind the async interface."""

    def __init__(self, breaker: CircuitBreaker) -> None:
        self.breaker = breaker

    @property
    def state(self) -> BreakerState:
        return self.breaker.state

    def would_allow(self) -> bool:
        return self.breaker.would_allow()

    async def allow(self) -> bool:
        return self.breaker.allow()

    async def record_success(self) -> None:
        self.breaker.record_success()

    async def record_failure(self) -> None:
        self.breaker.record_failure()

    async def release(self) -> None:
        self.breaker.release()


class AsyncLocalBreakerBoard:
    """A :class:`BreakerBoard` behind the async interface."""

    def __init__(self, board: BreakerBoard) -> None:
        self.board = board

    def get(self, name: str, config: BreakerConfig | None = None) -> AsyncLocalBreaker:
        return AsyncLocalBreaker(self.board.get(name, config))

    def states(self) -> dict[str, BreakerState]:
        return self.board.states()

    def unavailable(self) -> frozenset[str]:
        return self.board.unavailable()
