"""`gateway dev --config config/dev.yaml` as a subprocess on free ports: the shipped dev
config, its two emulated replicas and its keys, exactly as `make dev` runs them (only the
ports move, and the emulated GPU runs 20x faster)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.ports import free_port, free_ports

REPO = Path(__file__).resolve().parents[2]
DEV_KEY = "gw-dev-key"
LIMITED_KEY = "gw-dev-limited"
ADMIN_KEY = "gw-dev-admin"


class DevGateway:
    def __init__(self, time_scale: str = "0.05") -> None:
        self.port = free_port()
        first = free_ports(2)
        self.emulator_ports = (first, first + 1)
        self.log_path = Path(tempfile.mkstemp(prefix="gw-dev-", suffix=".log")[1])
        self.env = {
            **os.environ,
            "GATEWAY_EMULATOR_TIME_SCALE": time_scale,
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> DevGateway:
        log = open(self.log_path, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli.main",
                "dev",
                "--config",
                "config/dev.yaml",
                "--port",
                str(self.port),
                "--emulator-port",
                str(self.emulator_ports[0]),
            ],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        # one client for the polls: each httpx.get would load the CA bundle again
        with httpx.Client(timeout=0.5) as poll:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"gateway dev exited early:\n{self.log()}")
                try:
                    if poll.get(self.url + "/readyz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"gateway dev did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            # the process group: gateway dev and the emulators it started
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        code = self.process.returncode
        self.process = None
        return code


@contextmanager
def dev_gateway() -> Iterator[DevGateway]:
    gateway = DevGateway().start()
    try:
        yield gateway
    finally:
        gateway.stop()
