"""No provider credential ever reaches a client: whatever the provider, the status, or
the way a provider quotes the key back (whole, masked, in the message or beside it), the
gateway's answer carries none of it, in a response body or a stream's error event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_server import AnthropicFake
from tests.fakes.gemini_server import GeminiFake
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash

CLIENT_KEY = "gw-redaction-client"
OPENAI_KEY = "sk-proj-Q7wE9rT1yU3iO5pA7sD9fG1hJ3kL5zX7cV9bN1mQ"
ANTHROPIC_KEY = "sk-ant-api03-Zx8Cv6Bn4Mm2Lk0Jh8Gf6Dd4Ss2Aa0Qq-8Ww6Ee4Rr"
GEMINI_KEY = "AIzaSyD3f5G7h9J1k3L5m7N9p1Q3r5S7t9V1w3X"
KEYS = {"openai": OPENAI_KEY, "anthropic": ANTHROPIC_KEY, "gemini": GEMINI_KEY}


def quotes_of(key: str) -> list[str]:
    """The ways real providers echo a key: whole, OpenAI's stars, a short mask."""
    return [
        f"Incorrect API key provided: {key}.",
        f"Incorrect API key provided: {key[:8]}{'*' * 24}{key[-4:]}.",
        f"key {key[:3]}...{key[-4:]} is not valid for this model",
        f'{{"detail": "bad credential", "key": "{key}"}}',
    ]


def fragments_of(key: str) -> list[str]:
    """What must never be found in an answer: the key, its distinctive start and end."""
    return [key, key[:12], key[-4:]]


def assert_clean(text: str) -> None:
    for key in KEYS.values():
        for fragment in fragments_of(key):
            assert fragment not in text, f"{fragment!r} leaked in {text[:300]!r}"


def policy() -> dict[str, Any]:
    def model(provider: str, upstream: str) -> dict[str, Any]:
        return {
            "deployments": [{"provider": provider, "upstream_model": upstream}],
            "prices": {"input": 1.0, "output": 2.0},
        }

    return {
        "models": {
            "gpt": model("openai", "gpt-4.1"),
            "claude": model("anthropic", "claude-sonnet-4-5"),
            "gemini": model("google", "gemini-2.5-flash"),
        },
        "tenants": {"acme": {"keys": [{"id": "r", "hash": key_hash(CLIENT_KEY)}]}},
    }


def provider(kind: str, base_url: str, variable: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "base_url": base_url,
        "api_key": "${" + variable + "}",
        # every scripted error is final: one attempt each, no breaker in the way
        "retry": {"max_attempts": 1},
        "breaker": {"failure_threshold": 1000, "min_requests": 1000},
    }


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[OpenAIFake, AnthropicFake, GeminiFake]]:
    with (
        OpenAIFake() as o,
        AnthropicFake(api_key=ANTHROPIC_KEY) as a,
        GeminiFake(api_key=GEMINI_KEY) as g,
    ):
        yield o, a, g


@pytest.fixture(scope="module")
def gateway(fakes: tuple[OpenAIFake, AnthropicFake, GeminiFake]) -> Iterator[GatewayProcess]:
    o, a, g = fakes
    config = {
        "providers": {
            "openai": provider("openai", o.base_url, "R_OPENAI_KEY"),
            "anthropic": provider("anthropic", a.base_url, "R_ANTHROPIC_KEY"),
            "google": provider("gemini", g.base_url, "R_GEMINI_KEY"),
        }
    }
    env = {"R_OPENAI_KEY": OPENAI_KEY, "R_ANTHROPIC_KEY": ANTHROPIC_KEY, "R_GEMINI_KEY": GEMINI_KEY}
    with GatewayProcess(config, policy(), env=env) as process:
        yield process


def post(gateway: GatewayProcess, model: str, stream: bool = False) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
        timeout=10,
    )


STATUSES = [400, 404, 408, 429, 500, 503]


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("quote", range(4))
def test_openai_compatible_errors_never_carry_the_key(
    gateway: GatewayProcess,
    fakes: tuple[OpenAIFake, AnthropicFake, GeminiFake],
    status: int,
    quote: int,
) -> None:
    message = quotes_of(OPENAI_KEY)[quote]
    error = {"message": message, "type": "invalid_request_error", "param": OPENAI_KEY}
    error["code"] = OPENAI_KEY
    fakes[0].enqueue(Reply(status=status, body={"error": error, "echo": OPENAI_KEY}))
    response = post(gateway, "gpt")
    assert response.status_code >= 400
    assert "error" in response.json()
    assert_clean(response.text)
    assert_clean(json.dumps(dict(response.headers)))


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("quote", range(4))
def test_anthropic_errors_never_carry_the_key(
    gateway: GatewayProcess,
    fakes: tuple[OpenAIFake, AnthropicFake, GeminiFake],
    status: int,
    quote: int,
) -> None:
    fakes[1].enqueue_error(status, "invalid_request_error", quotes_of(ANTHROPIC_KEY)[quote])
    response = post(gateway, "claude")
    assert response.status_code >= 400
    assert_clean(response.text)


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("quote", range(4))
def test_gemini_errors_never_carry_the_key(
    gateway: GatewayProcess,
    fakes: tuple[OpenAIFake, AnthropicFake, GeminiFake],
    status: int,
    quote: int,
) -> None:
    fakes[2].enqueue_error(status, "INVALID_ARGUMENT", quotes_of(GEMINI_KEY)[quote])
    response = post(gateway, "gemini")
    assert response.status_code >= 400
    assert_clean(response.text)


def test_a_stream_error_event_never_carries_the_key(
    gateway: GatewayProcess, fakes: tuple[OpenAIFake, AnthropicFake, GeminiFake]
) -> None:
    fakes[0].enqueue(Reply(fail_after_chunks=1, words=["a", "b", "c"]))
    # the fake's mid-stream error says "upstream crashed": script one that quotes the key
    fakes[0].requests.clear()
    response = post(gateway, "gpt", stream=True)
    assert response.status_code == 200
    assert "upstream crashed" in response.text
    for message in quotes_of(OPENAI_KEY):
        fakes[0].enqueue(Reply(fail_after_chunks=1, words=["a", "b"], stream_error=message))
        response = post(gateway, "gpt", stream=True)
        assert response.status_code == 200
        assert response.text.rstrip().endswith("data: [DONE]")
        assert '"error"' in response.text
        assert_clean(response.text)


def test_the_gateway_log_never_carries_the_key(
    gateway: GatewayProcess, fakes: tuple[OpenAIFake, AnthropicFake, GeminiFake]
) -> None:
    for message in quotes_of(OPENAI_KEY):
        fakes[0].enqueue(Reply.error(500, message))
        fakes[0].enqueue(Reply(fail_after_chunks=1, words=["a", "b"], stream_error=message))
        assert post(gateway, "gpt").status_code == 502
        assert '"error"' in post(gateway, "gpt", stream=True).text
    log = gateway.log_path.read_text(errors="replace")
    assert "failed mid-way" in log
    assert_clean(log)
