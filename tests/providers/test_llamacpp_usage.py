"""llama-server's prompt-cache count (`timings.cache_n`) becomes the usage's
`prompt_tokens_details.cached_tokens`, for servers that put it only in `timings`."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from pydantic import SecretStr

from gateway.providers.base import Target
from gateway.providers.openai_compatible import (
    OpenAICompatible,
    OpenAICompatibleStream,
    cached_tokens_from_timings,
)
from gateway.providers.sse import SSEEvent
from gateway.settings.server import ProviderSettings
from tests.providers.support import make_call

TIMINGS = {
    "cache_n": 1536,
    "prompt_n": 64,
    "prompt_ms": 18.2,
    "predicted_n": 8,
    "predicted_ms": 9.9,
}


def completion(usage: dict[str, Any]) -> dict[str, Any]:
    """A llama-server chat completion: OpenAI's shape plus its own `timings`."""
    return {
        "choices": [
            {
                "finish_reason": "length",
                "index": 0,
                "message": {"role": "assistant", "content": "ships ledger tariff"},
            }
        ],
        "created": 1_764_000_000,
        "model": "tiny-llama",
        "system_fingerprint": "b0-unknown",
        "object": "chat.completion",
        "usage": usage,
        "id": "chatcmpl-abc",
        "timings": TIMINGS,
    }


OLD_USAGE = {"completion_tokens": 8, "prompt_tokens": 1600, "total_tokens": 1608}
NEW_USAGE = {**OLD_USAGE, "prompt_tokens_details": {"cached_tokens": 1536}}


def target() -> Target:
    provider = ProviderSettings(
        kind="openai", base_url="http://llama:8080/v1", api_key=SecretStr("x")
    )
    return Target("llama", provider, "tiny-llama", "http://llama:8080/v1")


def test_an_older_servers_cache_count_reaches_the_usage_and_the_client() -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}]})
    body = json.dumps(completion(OLD_USAGE)).encode()
    translated = OpenAICompatible().parse_response(body, call, target())
    assert translated.usage.cached_input_tokens == 1536
    assert translated.usage.input_tokens == 1600
    sent = msgspec.json.decode(translated.body)
    assert sent["usage"]["prompt_tokens_details"] == {"cached_tokens": 1536}


def test_a_count_the_server_already_put_in_usage_is_kept() -> None:
    reported = {**OLD_USAGE, "prompt_tokens_details": {"cached_tokens": 1000}}
    payload = completion(reported)
    assert cached_tokens_from_timings(payload) is payload


def test_payloads_without_timings_are_left_alone() -> None:
    payload = {"usage": OLD_USAGE, "choices": []}
    assert cached_tokens_from_timings(payload) is payload


def test_a_streams_usage_chunk_takes_the_count_from_its_timings() -> None:
    stream = OpenAICompatibleStream()
    chunk = {
        "choices": [],
        "created": 1_764_000_000,
        "id": "chatcmpl-abc",
        "model": "tiny-llama",
        "object": "chat.completion.chunk",
        "usage": OLD_USAGE,
        "timings": TIMINGS,
    }
    assert stream.feed(SSEEvent(json.dumps(chunk).encode())) == []
    assert stream.usage is not None and stream.usage.cached_input_tokens == 1536
    (held,) = stream.finish()
    sent = msgspec.json.decode(held)
    assert sent["usage"]["prompt_tokens_details"] == {"cached_tokens": 1536}
    # the served model as the upstream named it (issue 18)
    assert sent["model"] == "tiny-llama"


def test_a_current_servers_usage_reads_as_is() -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}]})
    body = json.dumps(completion(NEW_USAGE)).encode()
    translated = OpenAICompatible().parse_response(body, call, target())
    assert translated.usage.cached_input_tokens == 1536
