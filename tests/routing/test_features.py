"""Extracting routing features from a chat request and its headers."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.routing.features import RULE_TEXT_CHARS, extract_features, stable_hash
from gateway.tokens import count_prompt
from gateway.wire.openai import ChatRequest, request_decoder


def chat(**body: Any) -> ChatRequest:
    body.setdefault("model", "auto")
    body.setdefault("messages", [{"role": "user", "content": "hello there"}])
    return request_decoder.decode(msgspec.json.encode(body))


def extract(request: ChatRequest, headers: dict[str, str] | None = None, **kw: Any) -> Any:
    kw.setdefault("tenant", "acme")
    kw.setdefault("key_id", "k1")
    kw.setdefault("seed", 7)
    return extract_features(request, headers or {}, **kw)


def test_plain_request_needs_nothing_special() -> None:
    request = chat()
    found = extract(request)
    assert found.requested == "auto"
    assert found.prompt_tokens == count_prompt(request)
    assert found.required_capabilities == frozenset()
    assert (found.tenant, found.key_id, found.seed) == ("acme", "k1", 7)
    assert found.max_tokens is None
    assert not found.json_mode


def test_tools_images_json_schema_and_streaming_become_capabilities() -> None:
    request = chat(
        stream=True,
        tools=[{"type": "function", "function": {"name": "lookup"}}],
        response_format={"type": "json_schema", "json_schema": {"name": "x"}},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                ],
            }
        ],
    )
    found = extract(request)
    assert found.has_tools and found.has_images and found.json_mode and found.json_schema
    assert found.required_capabilities == {"tools", "vision", "json_schema", "streaming"}


def test_json_object_is_json_mode_without_needing_json_schema() -> None:
    found = extract(chat(response_format={"type": "json_object"}))
    assert found.json_mode
    assert "json_schema" not in found.required_capabilities


def test_max_completion_tokens_counts_as_max_tokens() -> None:
    assert extract(chat(max_completion_tokens=300)).max_tokens == 300
    assert extract(chat(max_tokens=200)).max_tokens == 200


def test_last_user_message_skips_later_assistant_turns() -> None:
    request = chat(
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"},
            {"role": "user", "content": [{"type": "text", "text": "second"}]},
            {"role": "assistant", "content": "another"},
        ]
    )
    assert extract(request).last_user_message == "second"


def test_last_user_message_is_bounded_for_rule_regexes() -> None:
    request = chat(messages=[{"role": "user", "content": "x" * (RULE_TEXT_CHARS + 500)}])
    assert len(extract(request).last_user_message) == RULE_TEXT_CHARS


def test_headers_are_lower_cased_and_credentials_dropped() -> None:
    headers = {"Authorization": "Bearer gw-secret", "X-Api-Key": "s", "X-Team": "ml"}
    found = extract(chat(), headers)
    assert dict(found.headers) == {"x-team": "ml"}


def test_override_headers_are_parsed() -> None:
    headers = {
        "X-Gateway-Route": "best",
        "x-gateway-min-quality": "0.85",
        "x-gateway-max-cost-usd": "0.02",
    }
    found = extract(chat(), headers)
    assert found.overrides.route == "best"
    assert found.overrides.min_quality == 0.85
    assert found.overrides.max_cost_usd == Decimal("0.02")


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-gateway-min-quality", "high"),
        ("x-gateway-min-quality", "1.5"),
        ("x-gateway-max-cost-usd", "-1"),
        ("x-gateway-max-cost-usd", "NaN"),
        ("x-gateway-max-cost-usd", "lots"),
    ],
)
def test_malformed_override_header_is_a_400_naming_it(header: str, value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        extract(chat(), {header: value})
    assert caught.value.param == header
    assert value in caught.value.message


def test_sticky_seed_follows_the_user_then_the_key() -> None:
    with_user = extract(chat(user="alice"), seed=1)
    assert with_user.sticky_seed() == extract(chat(user="alice"), seed=2).sticky_seed()
    assert with_user.sticky_seed() == stable_hash("alice")
    assert extract(chat(), key_id="k9").sticky_seed() == stable_hash("k9")
    assert extract(chat(), key_id=None, seed=5).sticky_seed() == 5
