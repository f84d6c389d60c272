"""The breaker board the dispatcher sees: local breakers, and for providers that set
`breaker.shared: true` the Redis-shared ones once the process has started.

Which board serves a name is fixed by the config it is asked with
(:attr:`BreakerConfig.shared`), so one deployment never has two breakers in one process
except across a reload that turns sharing on or off.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.resilience.async_breaker import AsyncBreaker, AsyncLocalBreakerBoard
from gateway.resilience.breaker import BreakerBoard, BreakerConfig, BreakerState
from gateway.resilience.shared_breaker import SharedBreakerBoard

SharedOpener = Callable[[], Awaitable[SharedBreakerBoard]]


class BreakerBoards:
    def __init__(self, local: BreakerBoard, open_shared: SharedOpener | None = None) -> None:
        self.local = AsyncLocalBreakerBoard(local)
        self._open_shared = open_shared
        self.shared: SharedBreakerBoard | None = None

    def get(self, name: str, config: BreakerConfig | None = None) -> AsyncBreaker:
        if config is not None and config.shared and self.shared is not None:
            return self.shared.get(name, config)
        return self.local.get(name, config)

    def states(self) -> dict[str, BreakerState]:
        states = self.local.states()
        if self.shared is not None:
            states.update(self.shared.states())
        return states

    async def start(self) -> None:
        if self._open_shared is not None and self.shared is None:
            self.shared = await self._open_shared()
            await self.shared.start()

    async def stop(self) -> None:
        shared, self.shared = self.shared, None
        if shared is not None:
            await shared.stop()
