"""Start the real gateway (`gateway serve`) as a subprocess on a free port, with config
files written for the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]


def key_hash(key: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class GatewayProcess:
    def __init__(
        self,
        config: dict[str, Any],
        policy: dict[str, Any],
        env: dict[str, str] | None = None,
        workers: int = 1,
        port: int | None = None,
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gw-test-"))
        # a port of the caller's: where something already waits for the gateway to be
        self.port = port if port is not None else free_port()
        self.workers = workers
        config = {**config, "policies": ["policy.yaml"]}
        config.setdefault("server", {})
        (self.dir / "config.yaml").write_text(yaml.safe_dump(config))
        (self.dir / "policy.yaml").write_text(yaml.safe_dump(policy))
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "gateway.log"

    @property
    def config_path(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def write_policy(self, policy: dict[str, Any]) -> None:
        tmp = self.dir / "policy.yaml.tmp"
        tmp.write_text(yaml.safe_dump(policy))
        tmp.replace(self.dir / "policy.yaml")

    def start(self) -> GatewayProcess:
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli.main",
                "serve",
                "--config",
                str(self.config_path),
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
            ],
            cwd=REPO,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        # generous: a loaded CI machine takes seconds to import and bind
        deadline = time.monotonic() + 60
        # one client for the polls: each httpx.get would load the CA bundle again
        with httpx.Client(timeout=0.5) as poll:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"gateway exited early:\n{self.log()}")
                try:
                    if poll.get(self.url + "/healthz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        # never leave the process behind for the next test to trip over
        self.stop()
        raise RuntimeError(f"gateway did not become healthy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        code = self.process.returncode
        self.process = None
        return code

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def openai_provider(base_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "openai",
        "base_url": base_url,
        "api_key": "${FAKE_UPSTREAM_KEY:-sk-upstream-secret}",
        "retry": {"max_attempts": 3, "base_delay_seconds": 0.01, "max_delay_seconds": 0.05},
        **extra,
    }
