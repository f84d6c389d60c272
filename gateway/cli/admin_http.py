"""How the CLI reaches a running gateway's admin API: its URL and the admin key, from
flags, the environment, or the config (its host and port; dev mode's printed key)."""

from __future__ import annotations

import argparse
import getpass
import os
from pathlib import Path
from typing import Any

import httpx

# what `make dev` serves, relative to a checkout: `gateway keys` finds the dev gateway and
# its printed admin key there when nothing else says where to go
DEV_CONFIG = Path("config") / "dev.yaml"


class AdminCallFailed(Exception):
    """What to print: the gateway's own error message, or why it could not be asked."""


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="the gateway (default: $GATEWAY_URL, else server.host:port of --config, "
        "else http://127.0.0.1:8080)",
    )
    parser.add_argument(
        "--admin-key",
        help="the admin key (default: $GATEWAY_ADMIN_KEY, else dev.print_admin_key of --config)",
    )
    parser.add_argument(
        "--config",
        help=f"the server config, for the URL and a dev admin key (default: {DEV_CONFIG} when "
        "it exists and no URL or admin key is given by a flag or variable)",
    )
    parser.add_argument("--json", action="store_true", help="print the API's JSON answer")


class AdminClient:
    def __init__(self, url: str, admin_key: str, actor: str) -> None:
        self.url = url.rstrip("/")
        self._headers = {"authorization": f"Bearer {admin_key}", "x-gateway-actor": actor}

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AdminClient:
        url = args.url or os.environ.get("GATEWAY_URL")
        key = args.admin_key or os.environ.get("GATEWAY_ADMIN_KEY")
        config = args.config
        if config is None and url is None and key is None and DEV_CONFIG.is_file():
            config = str(DEV_CONFIG)
        if config and (url is None or key is None):
            # imported here: only a config file needs the settings models
            from gateway.settings import SettingsError, load_settings

            try:
                settings = load_settings(config)
            except SettingsError as exc:
                raise AdminCallFailed("; ".join(exc.problems)) from None
            server, dev = settings.config.server, settings.config.dev
            url = url or f"http://{server.host}:{server.port}"
            key = key or (dev.print_admin_key if dev is not None else None)
        if not key:
            raise AdminCallFailed(
                "no admin key: pass --admin-key or set GATEWAY_ADMIN_KEY (the key whose hash "
                "is server.admin_key_hash)"
            )
        return cls(url or "http://127.0.0.1:8080", key, _login())

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = httpx.request(
                method, self.url + path, json=body, headers=self._headers, timeout=15
            )
        except httpx.HTTPError as exc:
            raise AdminCallFailed(
                f"no gateway answered at {self.url} ({type(exc).__name__}): start it, or pass --url"
            ) from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code >= 400:
            message = (
                answer["error"]["message"]
                if isinstance(answer, dict) and isinstance(answer.get("error"), dict)
                else response.text[:200]
            )
            raise AdminCallFailed(f"{method} {path}: {response.status_code}: {message}")
        return answer


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"
