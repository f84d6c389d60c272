"""A client's built-in tools (Responses `web_search`) on each upstream API: mapped to
the provider's own where it has one, else dropped (or refused, per provider settings),
and the upstream request says which."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import SecretStr

from gateway.errors import InvalidRequest
from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.base import Call, Target
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.openai_compatible import OpenAICompatible
from gateway.settings.server import ProviderSettings
from tests.providers.support import anthropic_target, gemini_target, make_call

FUNCTION = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def searching(raw: dict[str, object]) -> Call:
    return dataclasses.replace(make_call(raw), builtin_tools=("web_search",))


def openai_target(**settings: object) -> Target:
    provider = ProviderSettings(
        kind="openai", base_url="https://api.deepseek.test/v1", api_key=SecretStr("k"), **settings
    )
    return Target("deepseek", provider, "deepseek-chat", provider.base_url)


def test_anthropic_gets_its_own_web_search_beside_the_functions() -> None:
    call = searching({"messages": [{"role": "user", "content": "news?"}], "tools": [FUNCTION]})
    upstream = AnthropicTranslation().build_request(call, anthropic_target())
    tools = json.loads(upstream.body)["tools"]
    assert tools[0]["name"] == "f"
    assert tools[1] == {"type": "web_search_20250305", "name": "web_search"}
    assert upstream.changes == ["mapped-tool:web_search->web_search_20250305"]


def test_gemini_grounds_with_google_search_when_no_function_is_offered() -> None:
    call = searching({"messages": [{"role": "user", "content": "news?"}]})
    upstream = GeminiTranslation().build_request(call, gemini_target())
    assert json.loads(upstream.body)["tools"] == [{"googleSearch": {}}]
    assert upstream.changes == ["mapped-tool:web_search->google_search"]


def test_gemini_drops_the_search_beside_functions_which_gemini_2_cannot_combine() -> None:
    call = searching({"messages": [{"role": "user", "content": "news?"}], "tools": [FUNCTION]})
    upstream = GeminiTranslation().build_request(call, gemini_target())
    tools = json.loads(upstream.body)["tools"]
    assert [d["name"] for d in tools[0]["functionDeclarations"]] == ["f"]
    assert len(tools) == 1
    assert upstream.changes == ["dropped-tool:web_search"]


def test_chat_upstreams_drop_it_or_refuse_it_per_settings() -> None:
    call = searching({"messages": [{"role": "user", "content": "news?"}]})
    upstream = OpenAICompatible().build_request(call, openai_target())
    assert "tools" not in json.loads(upstream.body)
    assert upstream.changes == ["dropped-tool:web_search"]
    with pytest.raises(InvalidRequest) as refused:
        OpenAICompatible().build_request(call, openai_target(builtin_tools="refuse"))
    assert "web_search" in refused.value.message and refused.value.param == "tools"
