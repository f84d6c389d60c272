"""`gateway serve --config PATH [--host H] [--port N] [--workers N]`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from types import FrameType
from typing import Any

import uvicorn

from gateway.api.app import create_app
from gateway.api.server_limits import GatewayHttpProtocol
from gateway.observability.metrics import MULTIPROC_ENV, reset_multiprocess_dir
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import Settings, SettingsError, load_settings


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
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    serve(settings, args.host, args.port, args.workers)
    return 0


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
    }
    if workers > 1:
        os.environ["GATEWAY_CONFIG"] = str(settings.config_path)
        # one metrics exposition for all workers: prometheus-client's multiprocess mode
        metrics_dir = os.environ.setdefault(
            MULTIPROC_ENV, tempfile.mkdtemp(prefix="gateway-metrics-")
        )
        reset_multiprocess_dir(metrics_dir)
        uvicorn.run("gateway.api.app:app_from_env", factory=True, workers=workers, **options)
        return
    app = create_app(GatewayRuntime(settings))
    print(f"gateway listening on http://{host}:{port}/v1", flush=True)
    GatewayServer(uvicorn.Config(app, **options)).run()


class GatewayServer(uvicorn.Server):
    """uvicorn re-raises a captured SIGTERM after shutting down, so the process dies by the
    signal; for the gateway a SIGTERM that drained in-flight requests is a clean exit (0)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)
