"""What the gateway changes in coding agents' requests, and how the answer says so, with
the official SDKs sending the requests Claude Code and Codex send (no CLI needed):
`x-gateway-route` names a clamped max_tokens, the betas and fields a translation drops,
and flattened namespaces; a route may refuse the cap instead; the passthrough forwards
the betas the body needs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.coding_agents import (
    ADMIN_KEY,
    AGENT_KEY,
    DEEPSEEK_MAX_OUTPUT,
    AgentUpstreams,
    ScriptedTool,
    agent_upstreams,
    agents_gateway,
)
from tests.fakes.openai_server import Reply as OpenAIReply
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


def access_line(gateway: GatewayProcess, request_id: str) -> dict[str, Any]:
    """The JSON access-log line of one request (written off the event loop: waited for)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in gateway.log().splitlines():
            if line.startswith("{") and f'"request_id":"{request_id}"' in line:
                parsed: dict[str, Any] = json.loads(line)
                return parsed
        time.sleep(0.05)
    raise AssertionError(f"no access line for {request_id}")


def changed_items(route_header: str) -> list[str]:
    """`changed=` of x-gateway-route as a client parses it: `;` between parts, `,`
    between items."""
    parts = dict(p.strip().split("=", 1) for p in route_header.split(";") if "=" in p)
    return parts["changed"].split(",") if "changed" in parts else []


def test_the_access_log_line_names_what_the_gateway_changed(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, _ = setup
    raw = claude_code_request(gateway, "deepseek")
    changed = changed_items(raw.headers["x-gateway-route"])
    assert "max_tokens:32000->8192" in changed and "dropped:context_management" in changed
    line = access_line(gateway, raw.headers["x-request-id"])
    assert line["changed"].split(",") == changed
    # a request served as it came has no such field
    plain = claude_code_request(gateway, "claude-sonnet-4-5")
    assert "changed" not in access_line(gateway, plain.headers["x-request-id"])


def test_an_upstream_refusal_of_a_changed_request_says_what_was_changed(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, up = setup
    up.deepseek.enqueue(OpenAIReply.error(400, "This model's maximum context length is 131072"))
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude_code_request(gateway, "deepseek")
    request_id = refused.value.response.headers["x-request-id"]
    refusals = httpx.get(
        gateway.url + "/admin/refusals",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    ).json()
    [reason] = [r["reason"] for r in refusals["data"] if r["request_id"] == request_id]
    assert "maximum context length" in reason
    assert f"changed=max_tokens:32000->{DEEPSEEK_MAX_OUTPUT}," in reason
    assert "dropped:context_management" in access_line(gateway, request_id)["changed"]


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gemini-2.5-flash"])
def test_chat_fields_a_translation_cannot_carry_are_named_not_dropped_silently(
    setup: tuple[GatewayProcess, AgentUpstreams], model: str
) -> None:
    gateway, up = setup
    client = openai.OpenAI(base_url=gateway.base_url, api_key=AGENT_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        logprobs=True,
        # OpenAI's built-in search for chat, and an option only OpenAI has
        extra_body={"web_search_options": {}, "prediction": {"type": "content", "content": "x"}},
        # a field at what its absence means changes nothing, and is not named
        parallel_tool_calls=True,
    )
    assert raw.parse().choices[0].message.content
    assert changed_items(raw.headers["x-gateway-route"]) == [
        "dropped:logprobs",
        "dropped:web_search_options",
        "dropped:prediction",
    ]
    sent = str(up.bodies(model)[-1])
    assert "web_search_options" not in sent and "prediction" not in sent
    # to an OpenAI-compatible upstream the body goes as it came: nothing to name
    same = client.chat.completions.with_raw_response.create(
        model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], logprobs=True
    )
    assert changed_items(same.headers["x-gateway-route"]) == []


def test_client_chosen_names_keep_x_gateway_route_one_parseable_header(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, _ = setup
    odd = "a,b;c\r\nx-injected: 1 é"
    many = {f"option_{i}": 1 for i in range(40)}
    answer = httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
        | {odd: 1}
        | many,
        headers={"authorization": f"Bearer {AGENT_KEY}"},
        timeout=30,
    )
    assert answer.status_code == 200
    assert "x-injected" not in answer.headers
    route = answer.headers["x-gateway-route"]
    assert "\r" not in route and "\n" not in route
    changed = changed_items(route)
    assert changed[0] == "dropped:a_b_c__x-injected:_1__"
    # 24 named, the rest counted: a header any client's parser takes
    assert len(changed) == 25 and changed[-1] == "more:17"
    assert answer.headers["x-gateway-model"] == "claude-sonnet-4-5"
    # a Responses request's fields a translation leaves out, likewise
    translated = httpx.post(
        gateway.base_url + "/responses",
        json={"model": "gemini-2.5-flash", "input": "hi", "store": False, odd: 1},
        headers={"authorization": f"Bearer {AGENT_KEY}"},
        timeout=30,
    )
    assert translated.status_code == 200 and "x-injected" not in translated.headers
    assert changed_items(translated.headers["x-gateway-route"]) == [
        "dropped:a_b_c__x-injected:_1__"
    ]


def test_the_ledger_record_and_the_consoles_recent_requests_say_what_was_changed(
    setup: tuple[GatewayProcess, AgentUpstreams],
) -> None:
    gateway, _ = setup
    raw = claude_code_request(gateway, "deepseek")
    request_id = raw.headers["x-request-id"]
    with httpx.Client(base_url=gateway.url, timeout=10) as browser:
        assert browser.post("/console/login", data={"admin_key": ADMIN_KEY}).status_code == 303
        page = browser.get("/console").text
    table = page.split('id="recent-requests"', 1)[1].split("</table>", 1)[0]
    [row] = [row for row in table.split("<tr>") if request_id in row]
    expected = ", ".join(changed_items(raw.headers["x-gateway-route"]))
    assert f"changed: {expected}</span>" in row.replace("&gt;", ">")
    assert "dropped:context_management" in expected
