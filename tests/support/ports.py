"""Ports for the servers a test starts, one block per pytest-xdist worker.

Each worker (`PYTEST_XDIST_WORKER`: gw0, gw1, ...; a plain `pytest` run is worker 0) takes
its ports from its own block below the kernel's ephemeral range (32768-60999 on Linux),
so two workers never hand out the same port, and no client socket of this machine is
ever given one of them. Inside a block, ports are handed out in turn from a random
start (two test runs side by side rarely meet) and skipped while something holds them.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import threading

FIRST_PORT = 20_000
BLOCK_SIZE = 1_500
BLOCKS = 8  # 20000-31999: workers beyond the eighth share blocks, still probed


def worker_id() -> str:
    """The pytest-xdist worker this process serves ("gw0", ...), "main" without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def worker_index() -> int:
    name = worker_id()
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


class PortBlock:
    """One worker's block of ports, handed out in turn (the cursor wraps)."""

    def __init__(self, first: int, size: int, start: int) -> None:
        self.first = first
        self.size = size
        self._offset = start % size
        self._lock = threading.Lock()

    def take(self, count: int = 1) -> int:
        """The first of `count` consecutive ports, none of them bound now."""
        with self._lock:
            for _ in range(self.size):
                if self._offset + count > self.size:
                    self._offset = 0
                first = self.first + self._offset
                self._offset += count
                if all(_bindable(port) for port in range(first, first + count)):
                    return first
        raise RuntimeError(f"no {count} free consecutive ports in {self.first}+{self.size}")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@functools.cache
def worker_ports() -> PortBlock:
    """This process's block: one per worker process, made on first use."""
    first = FIRST_PORT + (worker_index() % BLOCKS) * BLOCK_SIZE
    return PortBlock(first, BLOCK_SIZE, random.randrange(BLOCK_SIZE))


def free_port() -> int:
    return worker_ports().take()


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports (e.g. the dev config's two replicas)."""
    return worker_ports().take(count)
