"""`gateway serve --config PATH [--host H] [--port N] [--workers N]`."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import uvicorn
from redis import Redis
from redis.exceptions import RedisError

from gateway.api.app import create_app
from gateway.api.server_limits import GatewayHttpProtocol
from gateway.cli.interpreter import InterpreterBuild, interpreter_build, slow_interpreter_warning
from gateway.cli.supervisor import WorkerSupervisor
from gateway.observability.metrics import MULTIPROC_ENV, reset_multiprocess_dir
from gateway.observability.tracing import TracingConfigError, tracing_settings
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import Settings, SettingsError, load_settings
from gateway.settings.server import StoreSettings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("serve", help="run the gateway")
    add_serve_arguments(parser)
    parser.set_defaults(func=run)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="server config YAML")
    parser.add_argument("--host", help="listen address (default from config)")
    parser.add_argument("--port", type=int, help="listen port (default from config)")
    parser.add_argument("--workers", type=int, help="worker processes (default from config)")


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        report_settings_error(exc)
        return 1
    if not report_tracing(os.environ):
        return 1
    report_interpreter()
    serve(settings, args.host, args.port, args.workers)
    return 0


def report_tracing(env: Mapping[str, str]) -> bool:
    """Say at start where traces go, if anywhere; False (do not start) when the OTEL_*
    variables ask for what the gateway cannot do."""
    try:
        tracing = tracing_settings(env)
    except TracingConfigError as exc:
        print(f"tracing: {exc}", file=sys.stderr, flush=True)
        return False
    if tracing is not None:
        print(f"traces: OTLP/HTTP to {redact_url(tracing.endpoint)}", flush=True)
    return True


def report_interpreter(build: InterpreterBuild | None = None) -> None:
    """Say at start when the interpreter is a build the gateway runs markedly slower on."""
    warning = slow_interpreter_warning(build or interpreter_build())
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def report_settings_error(exc: SettingsError) -> None:
    print(f"{len(exc.problems)} problem(s) found (see `gateway check`):", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)


def serve(settings: Settings, host: str | None, port: int | None, workers: int | None) -> None:
    listen = settings.config.server
    host = host or listen.host
    port = listen.port if port is None else port
    workers = workers or listen.workers
    if workers > 1 and settings.config.store.kind == "memory":
        raise SystemExit(
            "several workers need a shared store: set store.kind: redis "
            "(the in-memory store would give each worker its own limits and budgets)"
        )
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "loop": "uvloop",
        # httptools with the gateway's connection limits and OpenAI-shaped refusals
        "http": GatewayHttpProtocol,
        # between requests; the protocol also holds an idle connection's first request
        # to it, and applies the header/body timeouts and the connection cap itself
        "timeout_keep_alive": listen.connections.keep_alive_timeout_seconds,
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning",
        "timeout_graceful_shutdown": listen.shutdown_grace_seconds,
        "server_header": False,
        # nothing reads the client address from the scope (logs name the key and tenant),
        # so uvicorn's X-Forwarded-For rewriting would be work per request for nothing
        "proxy_headers": False,
    }
    report_store(settings.config.store)
    if workers > 1:
        os.environ["GATEWAY_CONFIG"] = str(settings.config_path)
        # one metrics exposition for all workers: prometheus-client's multiprocess mode
        metrics_dir = os.environ.setdefault(
            MULTIPROC_ENV, tempfile.mkdtemp(prefix="gateway-metrics-")
        )
        reset_multiprocess_dir(metrics_dir)
        config = uvicorn.Config(
            "gateway.api.app:app_from_env", factory=True, workers=workers, **options
        )
        # bound here, as uvicorn.run would, so the line below is printed only once bound
        sock = config.bind_socket()
        print(listening_line(host, sock.getsockname()[1], workers), flush=True)
        WorkerSupervisor(config, [sock], metrics_dir).run()
        return
    app = create_app(GatewayRuntime(settings, serving_process=True))
    server = GatewayServer(uvicorn.Config(app, **options))
    server.run()
    if not server.started:
        # uvicorn logged why (a port in use, a failed start); say it in one line too
        raise SystemExit(f"gateway did not start on {host}:{port}")


def listening_line(host: str, port: int, workers: int = 1) -> str:
    where = f"[{host}]" if ":" in host else host
    plural = f" ({workers} workers)" if workers > 1 else ""
    return f"gateway listening on http://{where}:{port}/v1{plural}"


def report_store(store: StoreSettings) -> None:
    """Say at start where the shared store is and whether it answers: the URL without
    its password, and the cause when it does not. The gateway starts either way and
    serves per `store.on_failure`."""
    if store.kind != "redis" or store.redis_url is None:
        return
    url = store.redis_url.get_secret_value()
    shown = redact_url(url)
    problem = redis_problem(url, timeout=min(2.0, max(0.5, store.timeout_ms / 1000 * 4)))
    if problem is None:
        print(f"store: redis at {shown}", flush=True)
        return
    off = (
        "requests are served WITHOUT rate limits or budgets until it answers"
        if store.on_failure == "fail_open"
        else "requests are refused with 503 until it answers"
    )
    print(
        f"store: redis at {shown} is not reachable: {problem} "
        f"(store.on_failure: {store.on_failure}: {off})",
        file=sys.stderr,
        flush=True,
    )


def redact_url(url: str) -> str:
    """`redis://user:secret@host:6379/0` -> `redis://user:***@host:6379/0`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def redis_problem(url: str, timeout: float) -> str | None:
    """None if a Redis answers PING at `url`; else the cause, in words."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        return f"unsupported scheme {parts.scheme!r} (use redis://host:port/db)"
    if parts.scheme != "unix":
        host, port = parts.hostname or "localhost", parts.port or 6379
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            return f"cannot resolve host {host!r} ({exc.strerror})"
    client = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    except RedisError as exc:
        return f"{type(exc).__name__}: {redact_text(str(exc), url)}"
    finally:
        client.close()
    return None


def redact_text(text: str, url: str) -> str:
    password = urlsplit(url).password
    return text.replace(password, "***") if password else text


class GatewayServer(uvicorn.Server):
    """uvicorn re-raises a captured SIGTERM after shutting down, so the process dies by the
    signal; for the gateway a SIGTERM that drained in-flight requests is a clean exit (0).
    The "listening on" line is printed once the socket is bound and the app has started."""

    def _log_started_message(self, listeners: Sequence[socket.SocketType]) -> None:
        port = listeners[0].getsockname()[1] if listeners else self.config.port
        print(listening_line(self.config.host, port), flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)
