"""`gateway dev --config config/dev.yaml [--emulator-port N]`: emulated GPU backends and
the gateway together, for a zero-setup first run.

The emulators' ports come from the config itself (each replica URL of each provider in
`dev.emulate`), so the gateway and the emulators can never disagree. `--emulator-port N`
moves them: it sets `GATEWAY_EMULATOR_PORT=N` and `GATEWAY_EMULATOR_PORT_2=N+1`, which
`config/dev.yaml` interpolates into those URLs, before the config is read. A port that is
taken is reported and the command stops: it never serves against whatever owns the port.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.cli.console_seed import start_seeding
from gateway.cli.serve import add_serve_arguments, report_settings_error, serve
from gateway.settings import Settings, SettingsError, load_settings

# the variables config/dev.yaml reads its emulator ports from (first, second replica)
PORT_VARIABLES = ("GATEWAY_EMULATOR_PORT", "GATEWAY_EMULATOR_PORT_2")


@dataclass(frozen=True)
class EmulatorSpot:
    provider: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev", help="run the gateway with emulated GPU backends beside it (no keys needed)"
    )
    add_serve_arguments(parser)
    parser.add_argument(
        "--emulator-port",
        type=int,
        metavar="N",
        help="first emulator port (replicas take N, N+1); default from the config (8081)",
    )
    parser.add_argument(
        "--seed-console",
        action="store_true",
        help="once up, make a demo tenant and key and send a few requests, so /console "
        "has data to show (needs dev.print_admin_key)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.emulator_port is not None:
        for offset, name in enumerate(PORT_VARIABLES):
            os.environ[name] = str(args.emulator_port + offset)
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        report_settings_error(exc)
        return 1
    dev = settings.config.dev
    if dev is None:
        print(f"{args.config}: no 'dev' section: use `gateway serve` instead", file=sys.stderr)
        return 1
    try:
        spots = emulator_spots(settings)
    except ValueError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    listen = settings.config.server
    host = args.host or listen.host
    port = listen.port if args.port is None else args.port
    taken = [s for s in spots if not port_is_free(s.host, s.port)]
    if not port_is_free(host, port):
        print(f"port {port} on {host} is taken: pass --port N for the gateway", file=sys.stderr)
        return 1
    if taken:
        names = ", ".join(str(s.port) for s in taken)
        print(
            f"emulator port(s) {names} already in use by another process: "
            "pass --emulator-port N (replicas use N and N+1)",
            file=sys.stderr,
        )
        return 1
    emulators = [_start_emulator(spot, dev.emulator_args) for spot in spots]
    try:
        for spot, emulator in zip(spots, emulators, strict=True):
            problem = _wait_healthy(spot, emulator)
            if problem:
                print(f"the emulator on :{spot.port} did not start: {problem}", file=sys.stderr)
                return 1
        pool = f" ({len(spots)} replicas of one GPU pool)" if len(spots) > 1 else ""
        print(f"emulated GPU backend{pool}: {', '.join(s.url for s in spots)}")
        if dev.print_key:
            print(f"dev client key: {dev.print_key}")
        for label, key in dev.print_keys.items():
            print(f"dev client key ({label}): {key}")
        if dev.print_admin_key:
            print(
                f"dev admin key:  {dev.print_admin_key}  "
                "(/console, GET /admin/spend, gateway spend, gateway keys)"
            )
        print(
            f'try: curl http://{host}:{port}/v1/chat/completions -H "Authorization: Bearer '
            f'{dev.print_key or "<key>"}" -H "Content-Type: application/json" '
            """-d '{"model": "auto", "messages": [{"role": "user", "content": "Hello"}]}'""",
            flush=True,
        )
        if args.seed_console and dev.print_admin_key:
            start_seeding(f"http://{host}:{port}", dev.print_admin_key, dev.print_key)
        serve(settings, args.host, args.port, 1)
    finally:
        for emulator in emulators:
            _stop(emulator)
    return 0


def emulator_spots(settings: Settings) -> list[EmulatorSpot]:
    """Where each emulator runs: the host and port of each URL of each emulated provider."""
    dev = settings.config.dev
    assert dev is not None
    spots: list[EmulatorSpot] = []
    for name in dev.emulate:
        provider = settings.config.providers.get(name)
        if provider is None:
            known = ", ".join(sorted(settings.config.providers)) or "none"
            raise ValueError(f"dev.emulate: unknown provider '{name}' (providers: {known})")
        urls = provider.replicas.urls if provider.replicas else [provider.base_url]
        for url in urls:
            parts = urlsplit(url)
            if parts.hostname is None or parts.port is None:
                raise ValueError(f"providers.{name}: {url!r} names no host and port to emulate")
            spots.append(EmulatorSpot(name, parts.hostname, parts.port))
    return spots


def port_is_free(host: str, port: int) -> bool:
    """Whether this process could bind host:port now (the same test the server makes)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _start_emulator(spot: EmulatorSpot, extra: list[str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gateway.emulator", "--host", spot.host]
    return subprocess.Popen([*command, "--port", str(spot.port), *extra])


def _wait_healthy(spot: EmulatorSpot, process: subprocess.Popen[bytes]) -> str | None:
    """None once the emulator we started answers /health; else why not. The process must
    still be alive after it answered: an emulator that failed to bind exits, and a health
    answer would then come from whatever owns the port."""
    deadline = time.monotonic() + 30
    url = f"http://{spot.host}:{spot.port}/health"
    # one client for every poll: httpx.get would load the CA bundle each time (~50 ms)
    with httpx.Client(timeout=0.5) as poll:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return f"it exited with status {process.returncode}"
            try:
                healthy = poll.get(url).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy and process.poll() is None:
                return None
            time.sleep(0.1)
    return "no answer on /health within 30 s"


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
