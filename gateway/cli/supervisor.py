"""The supervisor of `gateway serve --workers N`: uvicorn's, which restarts a worker that
dies, and which also takes every worker that has left (killed, crashed, hung and
killed, retired by a SIGHUP restart or SIGTTOU) out of the metrics' live gauges, so a
dead worker's requests no longer count as in flight and its open circuits no longer
show."""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn
from uvicorn.supervisors import Multiprocess

from gateway.observability.metrics import forget_worker


class WorkerSupervisor(Multiprocess):
    def __init__(
        self, config: uvicorn.Config, sockets: list[socket.socket], metrics_dir: str
    ) -> None:
        super().__init__(config, sockets)
        self.metrics_dir = metrics_dir

    # the two steps of uvicorn's supervising loop that replace or retire workers
    def keep_subprocess_alive(self) -> None:
        self._forgetting_departed(super().keep_subprocess_alive)

    def handle_signals(self) -> None:
        self._forgetting_departed(super().handle_signals)

    def _forgetting_departed(self, step: Callable[[], None]) -> None:
        before = self._worker_pids()
        step()
        # a worker leaves the list once uvicorn has joined it (and started its
        # replacement, which Linux's pids in sequence do not give the same pid)
        for pid in before - self._worker_pids():
            forget_worker(self.metrics_dir, pid)

    def _worker_pids(self) -> set[int]:
        return {process.pid for process in self.processes if process.pid is not None}
