"""`gateway dev --config config/dev.yaml`: the emulated backend and the gateway together,
for a zero-setup first run."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Any

import httpx

from gateway.cli.serve import add_serve_arguments, serve
from gateway.settings import SettingsError, load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev", help="run the gateway with an emulated GPU backend beside it (no keys needed)"
    )
    add_serve_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    dev = settings.config.dev
    if dev is None:
        print(f"{args.config}: no 'dev' section: use `gateway serve` instead", file=sys.stderr)
        return 1
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.emulator",
            "--port",
            str(dev.emulator_port),
            *dev.emulator_args,
        ]
    )
    try:
        if not _wait_healthy(f"http://127.0.0.1:{dev.emulator_port}/health", emulator):
            print("the emulated backend did not start", file=sys.stderr)
            return 1
        listen = settings.config.server
        host = args.host or listen.host
        port = listen.port if args.port is None else args.port
        print(f"emulated GPU backend on http://127.0.0.1:{dev.emulator_port}/v1")
        if dev.print_key:
            print(f"dev client key: {dev.print_key}")
        print(
            f'try: curl http://{host}:{port}/v1/chat/completions -H "Authorization: Bearer '
            f'{dev.print_key or "<key>"}" -H "Content-Type: application/json" '
            """-d '{"model": "auto", "messages": [{"role": "user", "content": "Hello"}]}'""",
            flush=True,
        )
        serve(settings, args.host, args.port, 1)
    finally:
        emulator.terminate()
        try:
            emulator.wait(timeout=10)
        except subprocess.TimeoutExpired:
            emulator.kill()
    return 0


def _wait_healthy(url: str, process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False
