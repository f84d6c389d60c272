"""Start and measure the processes a benchmark compares: upstreams, proxies, Redis."""

from __future__ import annotations

import hashlib
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
            httpx.get(url, timeout=0.5)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def process_tree(pid: int) -> list[int]:
    pids = [pid]
    for child in _children(pid):
        pids.extend(process_tree(child))
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process tree (nginx master + worker), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for one in process_tree(pid):
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def memory_bytes(pid: int, field: str = "VmRSS") -> int:
    """Summed over the process tree; `VmHWM` gives the peak."""
    total = 0
    for one in process_tree(pid):
        try:
            lines = Path(f"/proc/{one}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith(field + ":"):
                total += int(line.split()[1]) * 1024
    return total


class Service:
    def __init__(
        self,
        name: str,
        command: list[str],
        health_url: str,
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
    ) -> None:
        self.name = name
        self.cwd = cwd
        self.command = command
        self.health_url = health_url
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkdtemp(prefix=f"bench-{name}-")) / "output.log"

    def start(self, timeout: float = 30) -> Service:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_http(self.health_url, self.process, timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{self.log.read_text(errors='replace')[-2000:]}") from None
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


def upstream(port: int, core: int | None, *flags: str) -> Service:
    command = [sys.executable, str(REPO / "bench" / "upstream.py"), "--port", str(port), *flags]
    return Service(f"upstream-{port}", pinned(command, core), f"http://127.0.0.1:{port}/")


def start_redis(port: int, core: int | None) -> Service:
    from tests.support.redis_server import redis_server_binary

    folder = tempfile.mkdtemp(prefix="bench-redis-")
    command = [
        redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", folder,
    ]  # fmt: skip
    service = Service("redis", pinned(command, core), "")
    with open(service.log, "wb") as log:
        service.process = subprocess.Popen(service.command, stdout=log, stderr=subprocess.STDOUT)
    wait_for_redis(port)
    return service


def wait_for_redis(port: int, timeout: float = 10) -> None:
    """Until a redis-server on `port` answers PING (a slow start, e.g. under valgrind,
    takes a longer `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis did not start")


ANTHROPIC_UPSTREAM = "claude"


# a strong and a cheap tier for the route rows, priced and graded as GPT-4.1 and
# DeepSeek V3.2 are in policies/models.yaml
ROUTE_TIERS: dict[str, Any] = {
    name: {
        "deployments": [{"provider": "instant", "upstream_model": "bench-model"}],
        "prices": prices,
        "max_output_tokens": 4096,
        "quality": {"general": quality},
    }
    for name, prices, quality in (
        ("bench-strong", {"input": 2.00, "output": 8.00}, 0.86),
        ("bench-cheap", {"input": 0.28, "output": 0.42}, 0.84),
    )
}
BENCH_ROUTES: dict[str, Any] = {
    "auto": {
        "strategy": "cheapest",
        "models": ["bench-cheap", "bench-strong"],
        "task_class": "general",
        "min_quality": 0.8,
        "expected_output_tokens": 600,
    },
    "auto-learned": {
        "strategy": "learned",
        "models": ["bench-strong", "bench-cheap"],
        "min_quality": 0.8,
        "expected_output_tokens": 600,
        "learned": {
            "scorer": "ngram-chat-v1",
            "strong": ["bench-strong"],
            "cheap": ["bench-cheap"],
            "threshold": 0.0452,
            "fallback_strategy": "cheapest",
        },
    },
    # the chat route's word table (policies/routes.yaml's auto-chat threshold)
    "auto-chat": {
        "strategy": "learned",
        "models": ["bench-strong", "bench-cheap"],
        "min_quality": 0.8,
        "expected_output_tokens": 600,
        "learned": {
            "scorer": "chat-words-v1",
            "strong": ["bench-strong"],
            "cheap": ["bench-cheap"],
            "threshold": 0.3805,
            "fallback_strategy": "cheapest",
        },
    },
    # the response cache rows: the instant upstream's model behind an exact-match cache
    "cached": {"models": ["instant"], "cache": {"ttl_seconds": 3600}},
}


# the embeddings rows' model, on the instant upstream
EMBEDDING_MODEL: dict[str, Any] = {
    "kind": "embedding",
    "deployments": [{"provider": "instant", "upstream_model": "bench-embed"}],
    "prices": {"input": 0.02, "output": 0},
    "capabilities": [],
}


def bench_key_and_store(redis_port: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The bench tenant's key and the store: memory, or with `redis_port` Redis, and then
    the key has rate limits, a concurrency cap and a budget, so every request pays
    admission's round trip."""
    key: dict[str, Any] = {
        "id": "bench",
        "hash": "sha256:" + hashlib.sha256(BENCH_KEY.encode()).hexdigest(),
    }
    if redis_port is None:
        return key, {"kind": "memory"}
    key["limits"] = {
        "requests_per_minute": 100_000_000,
        "tokens_per_minute": 1_000_000_000_000,
        "max_concurrent": 100_000,
    }
    key["budgets"] = [{"usd": 1_000_000_000, "period": "month"}]
    store = {"kind": "redis", "redis_url": f"redis://127.0.0.1:{redis_port}/0", "cluster": False}
    return key, store


def describe_interpreter(python: Path | None = None) -> str:
    """The build of Python the gateway runs on (`python`, default this one), in words: the
    same gateway spends 11-28% more CPU a request on some builds than on others
    (gateway/cli/interpreter.py), so every table says which it measured."""
    command = [str(python or sys.executable), "-m", "gateway.cli.interpreter"]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} cannot run the gateway:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


def gateway(
    port: int,
    upstreams: dict[str, int],
    core: int | None,
    *,
    redis_port: int | None = None,
    source: Path | None = None,
    workers: int = 1,
    env: dict[str, str] | None = None,
    extra_models: bool | None = None,
    python: Path | None = None,
) -> Service:
    """The gateway with one model per upstream. With `redis_port`, production features are
    on: Redis admission (key rate limits, a concurrency cap and a budget, so every request
    pays the round trip), the Redis ledger, metrics and JSON access logs. With `source`,
    the gateway package is imported from that checkout instead (a baseline to compare
    against in the same run). `env`: variables for the gateway process (OTEL_* for
    tracing). `extra_models` (default: not for a baseline) adds the embedding model and
    the routes' tiers and routes to the policy. `python`: the interpreter the gateway runs
    on (default: this one), with the gateway and its dependencies installed."""
    folder = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    key, store = bench_key_and_store(redis_port)
    config: dict[str, Any] = {
        "server": {
            "host": "127.0.0.1",
            "port": port,
            "log_format": "json",
            "workers": workers,
        },
        "store": store,
        "providers": {
            name: {
                # an upstream named "claude" speaks Anthropic's Messages API
                "kind": "anthropic" if name == ANTHROPIC_UPSTREAM else "openai",
                "base_url": f"http://127.0.0.1:{upstream_port}"
                + ("" if name == ANTHROPIC_UPSTREAM else "/v1"),
                "retry": {"max_attempts": 1},
                "timeouts": {"read": 60},
            }
            for name, upstream_port in upstreams.items()
        },
        "policies": ["policy.yaml"],
    }
    policy: dict[str, Any] = {
        "models": {
            name: {
                "deployments": [{"provider": name, "upstream_model": "bench-model"}],
                "prices": {"input": 0.28, "output": 0.42},
                "max_output_tokens": 4096,
            }
            for name in upstreams
        },
        "tenants": {"bench": {"keys": [key]}},
    }
    if extra_models if extra_models is not None else source is None:
        # the embeddings rows: an embedding model on the instant upstream (a baseline
        # from before embeddings existed would refuse the `kind` field)
        policy["models"]["instant-embed"] = EMBEDDING_MODEL
        # the route rows: a strong and a cheap tier on the instant upstream, and the two
        # shipped routes over them as policies/routes.yaml writes them (`auto`: rules'
        # strategy, cheapest meeting a quality floor; `auto-learned`: the shipped scorer)
        policy["models"].update(ROUTE_TIERS)
        policy["routes"] = BENCH_ROUTES
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    command = [
        str(python or sys.executable), "-m", "gateway.cli.main", "serve",
        "--config", str(folder / "config.yaml"),
    ]  # fmt: skip
    # `python -m` puts the working directory first on sys.path: run from the source
    env = {**(env or {}), **({"PYTHONPATH": str(source)} if source is not None else {})}
    return Service(
        "gateway", pinned(command, core), f"http://127.0.0.1:{port}/healthz", env, source or REPO
    )


def otlp_sink(port: int, core: int | None) -> Service:
    """A local OTLP/HTTP collector (bench/otlp_sink.py) for the traced gateway's spans."""
    command = [sys.executable, str(REPO / "bench" / "otlp_sink.py"), "--port", str(port)]
    return Service("otlp-sink", pinned(command, core), f"http://127.0.0.1:{port}/")


def traced_env(sink_port: int) -> dict[str, str]:
    """Tracing on, every request sampled, spans to the local sink."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_SERVICE_NAME": "gateway-bench",
        # a batch every 200 ms (the default is 5 s): the row's spans are counted after it
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }


def spans_received(sink_port: int) -> int:
    return int(httpx.get(f"http://127.0.0.1:{sink_port}/count").json()["spans"])


NGINX_CONF = """
worker_processes 1;
daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 20000; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
{servers}
}}
"""

NGINX_SERVER = """
    upstream up_{port} {{ server 127.0.0.1:{upstream}; keepalive 512; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://up_{port};
            keepalive_requests 10000000;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 120s;
        }}
    }}
"""


def nginx(ports: dict[int, int], core: int | None) -> Service | None:
    """nginx as a plain reverse proxy, one listen port per upstream; None if not installed."""
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
    servers = "".join(NGINX_SERVER.format(port=p, upstream=u) for p, u in ports.items())
    (folder / "nginx.conf").write_text(NGINX_CONF.format(folder=folder, servers=servers))
    first = next(iter(ports))
    command = [binary, "-c", str(folder / "nginx.conf"), "-p", str(folder)]
    return Service("nginx", pinned(command, core), f"http://127.0.0.1:{first}/")
