"""Driving the pipeline in-process: a GatewayRuntime built from real config files, real
in-memory stores, a fake provider over real HTTP, and a client connection that records
what the pipeline sent (the client side of the exchange, not a stand-in for our I/O)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import BodyTooLarge
from gateway.pipeline.connection import ClientGone, RawHeaders
from gateway.pipeline.run import serve
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import load_settings
from tests.support.gateway_process import key_hash, openai_provider

KEY = "gw-pipeline-key"


class RecordingClient:
    """One client's side of an exchange: a body to send, and what came back."""

    def __init__(self, body: bytes, *, leave_after_frames: int | None = None) -> None:
        self._body = body
        self.body_read = False
        self.response_started = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.ended = False
        self._leave_after = leave_after_frames
        self._gone = asyncio.Event()

    async def read_body(self, limit: int) -> bytes:
        self.body_read = True
        if len(self._body) > limit:
            raise BodyTooLarge("too large")
        if self._gone.is_set():
            raise ClientGone
        return self._body

    async def start(self, status: int, headers: RawHeaders) -> None:
        assert not self.response_started, "the status line went out twice"
        self.response_started = True
        self.status = status
        self.headers = {k.decode(): v.decode() for k, v in headers}

    async def send(self, body: bytes, more: bool) -> None:
        assert not self.ended, "a body was sent after the response ended"
        self.chunks.append(body)
        self.ended = not more
        if self._leave_after is not None and len(self.chunks) >= self._leave_after:
            self._gone.set()

    def body_writer(self) -> None:
        return None  # every byte through send, as an ASGI server without the gateway's

    async def wait_disconnect(self) -> None:
        await self._gone.wait()

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def json(self) -> Any:
        return json.loads(self.body)


def write_config(
    folder: Path,
    upstream_url: str,
    policy: dict[str, Any],
    server: dict[str, Any] | None = None,
    providers: dict[str, Any] | None = None,
) -> Path:
    config = {
        "server": server or {},
        "providers": providers or {"fake": openai_provider(upstream_url)},
        "policies": ["policy.yaml"],
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    return folder / "config.yaml"


def one_model_policy(**key_settings: Any) -> dict[str, Any]:
    return {
        "models": {
            "m": {
                "deployments": [{"provider": "fake", "upstream_model": "up"}],
                "prices": {"input": 1.0, "output": 2.0},
            }
        },
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(KEY), **key_settings}]}},
    }


@asynccontextmanager
async def running(config: Path) -> AsyncIterator[GatewayRuntime]:
    runtime = GatewayRuntime(load_settings(config, env={"FAKE_UPSTREAM_KEY": "sk-fake-0123456789"}))
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def call(
    runtime: GatewayRuntime,
    body: dict[str, Any] | bytes,
    *,
    path: str = "/v1/chat/completions",
    key: str | None = KEY,
    headers: Mapping[str, str] | None = None,
    client: RecordingClient | None = None,
) -> RecordingClient:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    client = client or RecordingClient(raw)
    sent = dict(headers or {})
    if key is not None:
        sent["authorization"] = f"Bearer {key}"
    await serve(runtime, runtime.codecs[path], "POST", path, sent, client)
    return client


async def settled(runtime: GatewayRuntime) -> None:
    """Let the queued settlements and ledger writes of finished requests go out."""
    for _ in range(20):
        await asyncio.sleep(0.01)
