"""What the gateway changes in coding agents' requests, and how the answer says so, with
the official SDKs sending the requests Claude Code and Codex send (no CLI needed):
`x-gateway-route` names a clamped max_tokens, the betas and fields a translation drops,
and flattened namespaces; a route may refuse the cap instead; the passthrough forwards
the betas the body needs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.coding_agents import (
    AGENT_KEY,
    DEEPSEEK_MAX_OUTPUT,
    AgentUpstreams,
    ScriptedTool,
    agent_upstreams,
    agents_gateway,
)
from tests.support.gateway_process import GatewayProcess

BETAS = "claude-code-20250219,context-management-2025-06-27,effort-2025-11-24"
CLAUDE_CODE_BODY: dict[str, Any] = {
    "max_tokens": 32000,
    "messages": [{"role": "user", "content": "hi"}],
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
}


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[GatewayProcess, AgentUpstreams]]:
    with agent_upstreams(ScriptedTool("none", {})) as up, agents_gateway(up) as gateway:
        yield gateway, up


def claude_code_request(gateway: GatewayProcess, model: str) -> Any:
    client = anthropic.Anthropic(base_url=gateway.url, api_key=AGENT_KEY, max_retries=0)
    body = {k: v for k, v in CLAUDE_CODE_BODY.items() if k not in ("max_tokens", "messages")}
    return client.messages.with_raw_response.create(
        model=model,
        max_tokens=CLAUDE_CODE_BODY["max_tokens"],
        messages=CLAUDE_CODE_BODY["messages"],
        extra_body=body,
        extra_headers={"anthropic-beta": BETAS},
        # the SDK asks for a stream above 21,333 tokens unless given a timeout
        timeout=60,
    )


def test_a_cap_above_deepseeks_maximum_is_clamped_and_the_betas_dropped_visibly(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, up = setup
    raw = claude_code_request(gateway, "deepseek")
    assert raw.parse().content[0].text
    route = raw.headers["x-gateway-route"]
    changed = route.split("changed=", 1)[1].split(";")[0].split(",")
    assert changed == [
        f"max_tokens:32000->{DEEPSEEK_MAX_OUTPUT}",
        "dropped-beta:claude-code-20250219",
        "dropped-beta:context-management-2025-06-27",
        "dropped-beta:effort-2025-11-24",
        "dropped:context_management",
    ]
    sent = up.deepseek.requests[-1].body
    assert sent["max_tokens"] == DEEPSEEK_MAX_OUTPUT and "context_management" not in sent


def test_a_refusing_route_says_why_instead_of_clamping(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, _ = setup
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude_code_request(gateway, "deepseek-strict")
    assert "max_tokens 32000 above its max output 8192" in str(refused.value)


def test_the_passthrough_forwards_the_betas_the_body_needs(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, up = setup
    raw = claude_code_request(gateway, "claude-sonnet-4-5")
    assert raw.parse().content[0].text
    assert "changed=" not in raw.headers["x-gateway-route"]
    sent = up.anthropic.requests[-1]
    assert sent.headers["anthropic-beta"] == BETAS
    assert json.loads(sent.body)["context_management"] == CLAUDE_CODE_BODY["context_management"]


def test_a_codex_request_says_what_its_translation_changed(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, up = setup
    client = openai.OpenAI(base_url=gateway.base_url, api_key=AGENT_KEY, max_retries=0)
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
    }
    raw = client.responses.with_raw_response.create(
        model="gemini-2.5-flash",
        input="hi",
        tools=[namespace, {"type": "web_search", "external_web_access": False}],  # type: ignore[list-item]
        extra_body={"client_metadata": {"turn_id": "t1"}},
        store=False,
    )
    assert raw.parse().output_text
    changed = raw.headers["x-gateway-route"].split("changed=", 1)[1].split(",")
    # Gemini 2.x cannot search beside functions: the search is dropped, not mapped
    assert changed == [
        "flattened:multi_agent_v1",
        "dropped:client_metadata",
        "dropped-tool:web_search",
    ]
    sent = json.loads(up.gemini.requests[-1].body)
    names = [d["name"] for d in sent["tools"][0]["functionDeclarations"]]
    assert names == ["multi_agent_v1__close_agent"]
