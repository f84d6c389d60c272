"""llama-server replicas on free 127.0.0.1 ports, started and always stopped.

Each replica is one `llama-server` over the tiny model with `--parallel` slots
(continuous batching across them), `--metrics` and `/slots` on, prompt caching on
(the default `cache_prompt`), one compute thread (the machine has two cores for many
users) and no host-memory prompt cache (`--cache-ram 0`): a replica then holds exactly
the prompts its slots hold, as a GPU server holds what fits in its KV cache, so where a
request lands decides whether its prefix is reused.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

START_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class ServerOptions:
    parallel: int = 4
    # tokens per slot; the server's context is parallel x this
    context_per_slot: int = 4096
    threads: int = 1
    extra: tuple[str, ...] = ()

    def arguments(self, model: Path, port: int) -> list[str]:
        return [
            "--model", str(model),
            "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.parallel * self.context_per_slot),
            "--cont-batching", "--metrics", "--slots", "--no-webui",
            "--threads", str(self.threads), "--threads-batch", str(self.threads),
            "--cache-ram", "0",
            "--no-warmup",
            *self.extra,
        ]  # fmt: skip


@dataclass
class LlamaServer:
    binary: Path
    model: Path
    options: ServerOptions = ServerOptions()
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    log_path: Path | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    def start(self) -> LlamaServer:
        self.port = self.port or free_port()
        handle, name = tempfile.mkstemp(prefix=f"llama-server-{self.port}-", suffix=".log")
        self.log_path = Path(name)
        self.log = open(handle, "wb")  # noqa: SIM115
        command = [str(self.binary), *self.options.arguments(self.model, self.port)]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def wait_until_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """`/health` answers 200 once the model is loaded (503 while it loads)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited at start:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.root_url + "/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"llama-server not ready within {timeout:g} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL, as a crashed server: no goodbye to open connections."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()
            self.log = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def remove_log(self) -> None:
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def running_replicas(
    binary: Path, model: Path, count: int, options: ServerOptions = ServerOptions()
) -> Iterator[list[LlamaServer]]:
    """`count` replicas, all ready; stopped (their logs removed) on exit."""
    servers = [LlamaServer(binary, model, options) for _ in range(count)]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_until_ready()
        yield servers
    finally:
        stop_all(servers)


def stop_all(servers: Sequence[LlamaServer]) -> None:
    for server in servers:
        server.stop()
        server.remove_log()
