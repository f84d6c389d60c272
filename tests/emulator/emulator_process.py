"""Run an emulator on a free port for a test: as a `python -m gateway.emulator` process
(for exits and signals) or under uvicorn in a thread (faster to start)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from gateway.emulator import EmulatorOptions, build_app
from tests.support.redis_server import free_port


class EmulatorProcess:
    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        self.flags = flags
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway.emulator", "--port", str(self.port), *self.flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        # one client for the polls: each httpx.get would load the CA bundle again
        with httpx.Client(timeout=0.5) as poll:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"emulator exited: {self.stderr()}")
                try:
                    if poll.get(f"{self.base_url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    time.sleep(0.05)
        raise RuntimeError("emulator did not become healthy in time")

    def stderr(self) -> str:
        if self.process is None or self.process.stderr is None:
            return ""
        if self.process.poll() is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@contextmanager
def running_emulator(*flags: str) -> Iterator[EmulatorProcess]:
    emulator = EmulatorProcess(*flags)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


class EmulatorThread:
    """The emulator app under uvicorn in a background thread: a real socket, no fork."""

    def __init__(self, options: EmulatorOptions) -> None:
        self.port = free_port()
        self.app = build_app(options)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            lifespan="on",
            log_level="warning",
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("emulator thread did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@contextmanager
def emulator_thread(**options: Any) -> Iterator[EmulatorThread]:
    emulator = EmulatorThread(EmulatorOptions(**options))
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()
