"""The OpenAI Agents SDK, run as a user runs it, through the real gateway: an agent
with one function tool completes a two-turn task (call the tool, then answer with its
result) on the Responses API and on chat completions, with a scripted Anthropic fake
behind the gateway; the ledger shows both runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai import AsyncOpenAI

from tests.e2e.responses_setup import ADMIN_KEY, GLOBEX_KEY, Upstreams, gateway, upstreams
from tests.fakes.anthropic_server import text_message, tool_message
from tests.support.gateway_process import GatewayProcess

LOOKED_UP: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    LOOKED_UP.append(city)
    return f"sunny and 24C in {city}"


@pytest.fixture(scope="module")
def up() -> Iterator[Upstreams]:
    with upstreams() as servers:
        yield servers


@pytest.fixture(scope="module")
def gw(up: Upstreams) -> Iterator[GatewayProcess]:
    # the SDK would export traces to OpenAI: nothing leaves this machine
    set_tracing_disabled(True)
    with gateway(up, None) as process:
        yield process


def run_agent(model: Model, up: Upstreams) -> str:
    up.anthropic.enqueue_message(tool_message([("toolu_7", "get_weather", {"city": "Lisbon"})]))
    up.anthropic.enqueue_message(text_message("It is sunny and 24C in Lisbon."))
    agent = Agent(
        name="weather",
        instructions="Answer with the tool's data.",
        tools=[get_weather],
        model=model,
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Lisbon?"))
    return str(result.final_output)


def agent_client(gw: GatewayProcess) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=gw.base_url, api_key=GLOBEX_KEY, max_retries=0)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_an_agent_with_a_tool_completes_a_two_turn_task(
    gw: GatewayProcess, up: Upstreams, api: str
) -> None:
    LOOKED_UP.clear()
    client = agent_client(gw)
    model: Model = (
        OpenAIResponsesModel(model="claude", openai_client=client)
        if api == "responses"
        else OpenAIChatCompletionsModel(model="claude", openai_client=client)
    )
    before = len(up.anthropic.requests)
    answer = run_agent(model, up)
    assert answer == "It is sunny and 24C in Lisbon."
    assert LOOKED_UP == ["Lisbon"]
    first, second = (r.json for r in up.anthropic.requests[before:])
    assert first["tools"][0]["name"] == "get_weather"
    # the second turn carries the tool's result back to the model
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_7"
    assert "sunny and 24C in Lisbon" in json.dumps(result["content"])


def test_the_ledger_shows_both_runs(gw: GatewayProcess, up: Upstreams) -> None:
    for model in (
        OpenAIResponsesModel(model="claude", openai_client=agent_client(gw)),
        OpenAIChatCompletionsModel(model="claude", openai_client=agent_client(gw)),
    ):
        run_agent(model, up)
    spend = httpx.get(
        gw.url + "/admin/spend",
        params={"tenant": "globex", "key": "globex-key"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    ).json()
    # two model calls per run, at least two runs in this module
    assert spend["total"]["requests"] >= 4
    assert float(spend["total"]["cost_usd"]) > 0
