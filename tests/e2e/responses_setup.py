"""One gateway process (`gateway serve`) in front of the OpenAI, Anthropic and Gemini
fakes and the emulator, for the Responses, embeddings and model-lookup tests; two
tenants; the conversation store in Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.emulator.emulator_process import EmulatorThread, emulator_thread
from tests.fakes.anthropic_server import DEFAULT_KEY as ANTHROPIC_KEY
from tests.fakes.anthropic_server import AnthropicFake
from tests.fakes.gemini_server import DEFAULT_KEY as GEMINI_KEY
from tests.fakes.gemini_server import GeminiFake
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

ACME_KEY = "gw-responses-acme"
GLOBEX_KEY = "gw-responses-globex"
ADMIN_KEY = "gw-responses-admin"
NARROW_KEY = "gw-responses-narrow"
# batch caps well below the providers' real ones, so a modest request needs several calls
OPENAI_EMBED_CAP = 4
GEMINI_EMBED_CAP = 3
BREAKER_OFF = {"failure_threshold": 1000, "min_requests": 1000}


@dataclass
class Upstreams:
    openai: OpenAIFake
    anthropic: AnthropicFake
    gemini: GeminiFake
    emulator: EmulatorThread


@contextmanager
def upstreams() -> Iterator[Upstreams]:
    with (
        OpenAIFake() as openai_fake,
        AnthropicFake() as anthropic_fake,
        GeminiFake() as gemini_fake,
        emulator_thread(model="emu") as emulator,
    ):
        openai_fake.embedding_batch_cap = OPENAI_EMBED_CAP
        gemini_fake.embedding_batch_cap = GEMINI_EMBED_CAP
        yield Upstreams(openai_fake, anthropic_fake, gemini_fake, emulator)


def _model(provider: str, upstream: str, **extra: Any) -> dict[str, Any]:
    return {
        "deployments": [{"provider": provider, "upstream_model": upstream}],
        "prices": {"input": 1.0, "output": 2.0},
        "capabilities": ["tools", "json_schema", "streaming"],
        **extra,
    }


def _embedding(provider: str, upstream: str) -> dict[str, Any]:
    return {
        "kind": "embedding",
        "deployments": [{"provider": provider, "upstream_model": upstream}],
        "prices": {"input": 0.02, "output": 0},
        "capabilities": [],
    }


def policy() -> dict[str, Any]:
    return {
        "models": {
            "gpt": _model("openai", "gpt-4.1"),
            "claude": _model("anthropic", "claude-sonnet-4-5", default_max_tokens=512),
            "emu-chat": _model("emulator", "emu"),
            "oa-embed": _embedding("openai", "text-embedding-3-small"),
            "gem-embed": _embedding("gemini", "gemini-embedding-001"),
            "emu-embed": _embedding("emulator", "emu"),
        },
        "routes": {"embed": {"strategy": "ordered", "models": ["oa-embed", "gem-embed"]}},
        "tenants": {
            "acme": {"keys": [{"id": "acme-key", "hash": key_hash(ACME_KEY)}]},
            "globex": {
                "keys": [
                    {"id": "globex-key", "hash": key_hash(GLOBEX_KEY)},
                    {"id": "narrow", "hash": key_hash(NARROW_KEY), "models": ["gpt"]},
                ]
            },
        },
    }


def config(up: Upstreams, redis: RedisServer | None) -> dict[str, Any]:
    store: dict[str, Any] = {"kind": "memory"}
    if redis is not None:
        store = {"kind": "redis", "redis_url": redis.url, "timeout_ms": 2000}
    return {
        "server": {"shutdown_grace_seconds": 2, "admin_key_hash": key_hash(ADMIN_KEY)},
        "store": store,
        "providers": {
            "openai": openai_provider(
                up.openai.base_url,
                native_apis=["responses"],
                embedding_batch_size=OPENAI_EMBED_CAP,
                breaker=BREAKER_OFF,
            ),
            "anthropic": {
                "kind": "anthropic",
                "base_url": up.anthropic.base_url,
                "api_key": ANTHROPIC_KEY,
                "breaker": BREAKER_OFF,
            },
            "gemini": {
                "kind": "gemini",
                "base_url": up.gemini.base_url,
                "api_key": GEMINI_KEY,
                "embedding_batch_size": GEMINI_EMBED_CAP,
                "breaker": BREAKER_OFF,
            },
            "emulator": openai_provider(up.emulator.base_url + "/v1", breaker=BREAKER_OFF),
        },
    }


def gateway(up: Upstreams, redis: RedisServer | None) -> GatewayProcess:
    return GatewayProcess(config(up, redis), policy())
