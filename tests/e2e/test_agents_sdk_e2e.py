"""The OpenAI Agents SDK, run as a user runs it, through the real gateway: an agent
with one function tool completes a two-turn task (call the tool, then answer with its
result) with the SDK's Responses model and its chat completions model, on each of the
four model families behind strict fakes; the ledger shows the runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    RunResult,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai import AsyncOpenAI

from tests.e2e.coding_agents import (
    ADMIN_KEY,
    AGENT_KEY,
    FAMILIES,
    AgentUpstreams,
    ScriptedTool,
    agent_upstreams,
    agents_gateway,
)
from tests.support.gateway_process import GatewayProcess

LOOKED_UP: list[str] = []
WEATHER = "sunny and 24C in Lisbon"


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    LOOKED_UP.append(city)
    return f"sunny and 24C in {city}"


@pytest.fixture(scope="module")
def agents_setup() -> Iterator[tuple[GatewayProcess, AgentUpstreams]]:
    # the SDK would export traces to OpenAI: nothing leaves this machine
    set_tracing_disabled(True)
    tool = ScriptedTool("get_weather", {"city": "Lisbon"})
    with agent_upstreams(tool) as up, agents_gateway(up) as gateway:
        yield gateway, up


def agent_model(client: AsyncOpenAI, api: str, family: str) -> Model:
    if api == "responses":
        return OpenAIResponsesModel(model=family, openai_client=client)
    return OpenAIChatCompletionsModel(model=family, openai_client=client)


async def run_agent(gw: GatewayProcess, api: str, family: str) -> RunResult:
    """One run with a client closed on the loop that opened its connections: left open,
    the client's finalizer closes them from the next test's loop, and asyncio logs "Task
    exception was never retrieved" (RuntimeError: Event loop is closed)."""
    async with AsyncOpenAI(base_url=gw.base_url, api_key=AGENT_KEY, max_retries=0) as client:
        agent = Agent(
            name="weather",
            instructions="Answer with the tool's data.",
            tools=[get_weather],
            model=agent_model(client, api, family),
        )
        return await Runner.run(agent, "What is the weather in Lisbon?")


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("family", FAMILIES)
def test_an_agent_with_a_tool_completes_a_two_turn_task(
    agents_setup: tuple[GatewayProcess, AgentUpstreams], family: str, api: str
) -> None:
    gw, up = agents_setup
    LOOKED_UP.clear()
    before = len(up.bodies(family))
    result = asyncio.run(run_agent(gw, api, family))
    assert WEATHER in str(result.final_output)
    assert LOOKED_UP == ["Lisbon"]
    sent = up.bodies(family)[before:]
    # the tool's result went back to the family's provider in the second turn
    assert len(sent) == 2 and WEATHER in str(sent[1]) and WEATHER not in str(sent[0])


def test_the_ledger_shows_the_runs(agents_setup: tuple[GatewayProcess, AgentUpstreams]) -> None:
    gw, _ = agents_setup

    def spend() -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(
            gw.url + "/admin/spend",
            params={"tenant": "coders", "key": "agent"},
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
        ).json()
        return answer

    # two model calls per run, eight runs in this module; the ledger is written off the
    # requests' time, so the last runs' records may land a moment after their answers
    deadline = time.monotonic() + 15
    while spend()["total"]["requests"] < 16 and time.monotonic() < deadline:
        time.sleep(0.2)
    totals = spend()
    assert totals["total"]["requests"] >= 16
    assert float(totals["total"]["cost_usd"]) > 0
