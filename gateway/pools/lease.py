"""A reserved slot on one replica, held for the length of one upstream request."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType


class ReplicaLease:
    """Returned by `ReplicaPool.acquire`; give it back with :meth:`release` or `async with`.

    `url` is the replica's OpenAI base URL (`http://host:port/v1`). Releasing twice is
    harmless, so a `finally: lease.release()` next to an `async with` is safe too.
    """

    def __init__(self, replica: int, url: str, on_release: Callable[[ReplicaLease], None]) -> None:
        self.replica = replica
        self.url = url
        self._on_release = on_release
        self.released = False
        # set by ReplicaPool.record_result: a lease released without a verdict gives its
        # half-open trial slot back to the breaker instead of counting as an outcome
        self.verdict_recorded = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self._on_release(self)

    async def __aenter__(self) -> ReplicaLease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<ReplicaLease {self.url} {state}>"
