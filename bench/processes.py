"""Start and measure the processes a benchmark compares: upstreams and proxies."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
BENCH_KEY = "gw-bench-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(command: list[str], core: int | None) -> list[str]:
    if core is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return command
    return ["taskset", "-c", str(core), *command]


def wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=0.5).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(f) for f in fields[11:15]) / ticks


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Service:
    def __init__(
        self, name: str, command: list[str], health_url: str, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.command = command
        self.health_url = health_url
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        self.process = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_http(self.health_url, self.process)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None


def emulator(port: int, core: int | None, *extra: str) -> Service:
    command = [
        sys.executable,
        "-m",
        "gateway.emulator",
        "--port",
        str(port),
        "--model",
        "bench-model",
        *extra,
    ]
    return Service("emulator", pinned(command, core), f"http://127.0.0.1:{port}/health")


def gateway(
    port: int, upstream_port: int, core: int | None, config_extra: dict[str, Any] | None = None
) -> Service:
    import hashlib

    folder = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port, "log_format": "json"},
        "store": {"kind": "memory"},
        "providers": {
            "upstream": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{upstream_port}/v1",
                "retry": {"max_attempts": 1},
            }
        },
        "policies": ["policy.yaml"],
        **(config_extra or {}),
    }
    policy = {
        "models": {
            "bench-model": {
                "deployments": [{"provider": "upstream", "upstream_model": "bench-model"}],
                "prices": {"input": 0.28, "output": 0.42},
            }
        },
        "tenants": {
            "bench": {
                "keys": [
                    {
                        "id": "bench",
                        "hash": "sha256:" + hashlib.sha256(BENCH_KEY.encode()).hexdigest(),
                    }
                ]
            }
        },
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    command = [
        sys.executable,
        "-m",
        "gateway.cli.main",
        "serve",
        "--config",
        str(folder / "config.yaml"),
    ]
    return Service("gateway", pinned(command, core), f"http://127.0.0.1:{port}/healthz")
