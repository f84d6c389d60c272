"""Serve one emulator with uvicorn (uvloop + httptools when available)."""

from __future__ import annotations

import importlib.util
import signal
from types import FrameType

import uvicorn

from gateway.emulator.app import build_app
from gateway.emulator.options import EmulatorOptions


class _CleanExitServer(uvicorn.Server):
    """Shuts down gracefully on SIGINT/SIGTERM and exits 0.

    uvicorn re-raises the captured signal after shutting down, so the process would die
    by it (status -15); a supervisor or test should see a clean exit instead.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def serve(options: EmulatorOptions, host: str, port: int) -> None:
    """Run until SIGINT/SIGTERM, then return."""
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    has_httptools = importlib.util.find_spec("httptools") is not None
    config = uvicorn.Config(
        build_app(options),
        host=host,
        port=port,
        loop="uvloop" if has_uvloop else "asyncio",
        http="httptools" if has_httptools else "h11",
        lifespan="on",
        access_log=False,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=30,
    )
    _CleanExitServer(config).run()
