"""What the Anthropic-ingress end-to-end tests share: one real `gateway serve` on a
real Redis (so the ledger can be read) in front of the Anthropic, Gemini and OpenAI
fakes and the emulator (as a self-hosted SGLang), and `anthropic` SDK clients."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anthropic

from tests.e2e.support import ADMIN_KEY, store_config
from tests.support.gateway_process import GatewayProcess, key_hash

CLIENT_KEY = "gw-anthropic-e2e-key"
LIMITED_KEY = "gw-anthropic-e2e-limited"
SLOW_KEY = "gw-anthropic-e2e-slow"
ANTHROPIC_KEY = "sk-ant-e2e-SECRET-9c2b"
GEMINI_KEY = "AIza-e2e-SECRET-77d1"
OPENAI_KEY = "sk-openai-e2e-SECRET-41"
ALLOWED_BETA = "interleaved-thinking-2025-05-14"

CLAUDE_PRICES = {
    "input": 3.0,
    "output": 15.0,
    "cached_input": 0.3,
    "cache_write": 3.75,
    "cache_write_1h": 6.0,
}
MILLION = Decimal(1_000_000)

# client model name -> (provider, upstream model)
MODELS = {
    "claude-sonnet-4-5": ("anthropic", "claude-sonnet-4-5-20250929"),
    "gpt-4.1": ("openai", "gpt-4.1-2025-04-14"),
    "gemini-2.5-flash": ("google", "gemini-2.5-flash"),
    "llama-3.1-8b": ("sglang", "emulated-model"),
}


def _provider(kind: str, base_url: str, key: str | None, **extra: Any) -> dict[str, Any]:
    provider: dict[str, Any] = {
        "kind": kind,
        "base_url": base_url,
        "retry": {"max_attempts": 2, "base_delay_seconds": 0.01, "max_delay_seconds": 0.02},
        "timeouts": {"read": 10},
        # these tests script failures on purpose: a breaker must never cut them short
        "breaker": {"failure_threshold": 1000, "min_requests": 1000},
        **extra,
    }
    if key is not None:
        provider["api_key"] = key
    return provider


def gateway_config(
    redis_url: str, anthropic_url: str, gemini_url: str, openai_url: str, sglang_url: str
) -> dict[str, Any]:
    return {
        "server": {
            "admin_key_hash": key_hash(ADMIN_KEY),
            "max_body_bytes": 2 * 1024 * 1024,
            "shutdown_grace_seconds": 2,
        },
        "store": store_config(redis_url, timeout_ms=2000, on_failure="fail_closed"),
        "providers": {
            "anthropic": _provider(
                "anthropic", anthropic_url, ANTHROPIC_KEY, anthropic_betas=[ALLOWED_BETA]
            ),
            "google": _provider("gemini", gemini_url, GEMINI_KEY),
            "openai": _provider("openai", openai_url, OPENAI_KEY),
            "sglang": _provider("openai", sglang_url + "/v1", None),
        },
    }


def gateway_policy() -> dict[str, Any]:
    models: dict[str, Any] = {}
    for name, (provider, upstream) in MODELS.items():
        models[name] = {
            "deployments": [{"provider": provider, "upstream_model": upstream}],
            "prices": CLAUDE_PRICES if provider == "anthropic" else {"input": 1.0, "output": 2.0},
            "capabilities": ["tools", "vision", "json_schema", "streaming"]
            + (["reasoning"] if provider in ("anthropic", "google") else []),
            # Claude Code asks for up to 32000 output tokens
            "max_output_tokens": 64000,
            "context_window": 200000,
        }
    return {
        "models": models,
        "tenants": {
            "coders": {"keys": [{"id": "claude-code", "hash": key_hash(CLIENT_KEY)}]},
            "limited": {
                "keys": [{"id": "limited", "hash": key_hash(LIMITED_KEY), "models": ["gpt-4.1"]}]
            },
            "slow": {
                "keys": [
                    {
                        "id": "slow",
                        "hash": key_hash(SLOW_KEY),
                        "limits": {"requests_per_minute": 1, "requests_burst": 1},
                    }
                ]
            },
        },
    }


def sync_client(
    gateway: GatewayProcess, key: str = CLIENT_KEY, **options: Any
) -> anthropic.Anthropic:
    # max_retries=0: retries must be the gateway's, never the SDK's
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, **options)


def async_client(gateway: GatewayProcess, key: str = CLIENT_KEY) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gateway.url, api_key=key, max_retries=0)


def claude_cost(
    *, uncached: int, read: int = 0, write_5m: int = 0, write_1h: int = 0, output: int = 0
) -> Decimal:
    prices = {k: Decimal(str(v)) for k, v in CLAUDE_PRICES.items()}
    micro = (
        uncached * prices["input"]
        + read * prices["cached_input"]
        + write_5m * prices["cache_write"]
        + write_1h * prices["cache_write_1h"]
        + output * prices["output"]
    )
    return micro / MILLION
