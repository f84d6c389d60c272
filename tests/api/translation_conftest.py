"""Fixtures for the end-to-end translation tests: the real gateway (`gateway serve`) in
front of the fake Anthropic and Gemini servers, and openai SDK clients pointed at it.

Not a `conftest.py` on purpose: `tests/api/conftest.py` belongs to the forwarding tests;
`test_translation_e2e.py` imports these fixtures by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakes.anthropic_server import AnthropicFake
from tests.fakes.gemini_server import GeminiFake
from tests.support.gateway_process import GatewayProcess, key_hash

CLIENT_KEY = "gw-e2e-translation-key"
# distinctive enough that finding them anywhere in client output or logs means a leak
ANTHROPIC_KEY = "sk-ant-e2e-SECRET-7f3a9c1d"
GEMINI_KEY = "AIza-e2e-SECRET-41b2d8e6"
WRONG_ANTHROPIC_KEY = "sk-ant-e2e-WRONG-0b9e55aa"
WRONG_GEMINI_KEY = "AIza-e2e-WRONG-c3d1f07b"
SECRETS = (ANTHROPIC_KEY, GEMINI_KEY, WRONG_ANTHROPIC_KEY, WRONG_GEMINI_KEY)

# USD per million tokens, as the providers list them
CLAUDE_PRICES = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}
GEMINI_PRICES = {"input": 0.3, "output": 2.5, "cached_input": 0.075}
CLAUDE_DEFAULT_MAX_TOKENS = 1024


def _provider(kind: str, base_url: str, key_variable: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "base_url": base_url,
        "api_key": "${" + key_variable + "}",
        "retry": {"max_attempts": 3, "base_delay_seconds": 0.01, "max_delay_seconds": 0.02},
        "timeouts": {"read": 5},
        # these tests script failures on purpose: a breaker must never cut them short
        "breaker": {"failure_threshold": 1000, "min_requests": 1000},
    }


def _model(provider: str, upstream: str, prices: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {
        "deployments": [{"provider": provider, "upstream_model": upstream}],
        "prices": prices,
        "capabilities": ["tools", "vision", "json_schema", "streaming"],
        **extra,
    }


def translation_policy() -> dict[str, Any]:
    claude = "claude-sonnet-4-5"
    return {
        "models": {
            "claude": _model(
                "anthropic", claude, CLAUDE_PRICES, default_max_tokens=CLAUDE_DEFAULT_MAX_TOKENS
            ),
            "gemini": _model("google", "gemini-2.5-flash", GEMINI_PRICES),
            "claude-misconfigured": _model("anthropic-wrong-key", claude, CLAUDE_PRICES),
            "gemini-misconfigured": _model("google-wrong-key", "gemini-2.5-flash", GEMINI_PRICES),
        },
        "tenants": {"acme": {"keys": [{"id": "e2e", "hash": key_hash(CLIENT_KEY)}]}},
    }


@pytest.fixture(scope="module")
def anthropic_fake() -> Iterator[AnthropicFake]:
    with AnthropicFake(api_key=ANTHROPIC_KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def gemini_fake() -> Iterator[GeminiFake]:
    with GeminiFake(api_key=GEMINI_KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def translating_gateway(
    anthropic_fake: AnthropicFake, gemini_fake: GeminiFake
) -> Iterator[GatewayProcess]:
    config = {
        "providers": {
            "anthropic": _provider("anthropic", anthropic_fake.base_url, "E2E_ANTHROPIC_KEY"),
            "google": _provider("gemini", gemini_fake.base_url, "E2E_GEMINI_KEY"),
            "anthropic-wrong-key": _provider(
                "anthropic", anthropic_fake.base_url, "E2E_WRONG_ANTHROPIC_KEY"
            ),
            "google-wrong-key": _provider("gemini", gemini_fake.base_url, "E2E_WRONG_GEMINI_KEY"),
        }
    }
    env = {
        "E2E_ANTHROPIC_KEY": ANTHROPIC_KEY,
        "E2E_GEMINI_KEY": GEMINI_KEY,
        "E2E_WRONG_ANTHROPIC_KEY": WRONG_ANTHROPIC_KEY,
        "E2E_WRONG_GEMINI_KEY": WRONG_GEMINI_KEY,
    }
    with GatewayProcess(config, translation_policy(), env=env) as process:
        yield process


@pytest.fixture
def fresh_fakes(anthropic_fake: AnthropicFake, gemini_fake: GeminiFake) -> None:
    """Each test starts with no recorded requests and nothing scripted."""
    for fake in (anthropic_fake, gemini_fake):
        fake.requests.clear()
        fake.script.clear()


@pytest.fixture
def sdk(translating_gateway: GatewayProcess, fresh_fakes: None) -> Iterator[openai.OpenAI]:
    # max_retries=0: retries must be the gateway's, never the SDK's
    with openai.OpenAI(
        base_url=translating_gateway.base_url, api_key=CLIENT_KEY, max_retries=0
    ) as client:
        yield client


def async_sdk(gateway: GatewayProcess) -> openai.AsyncOpenAI:
    """An async client; create it inside the event loop that uses it."""
    return openai.AsyncOpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
