"""pydantic-ai against `gateway dev`: typed output (its output tool), a function tool the
agent calls and then answers after, and a streamed text run."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from tests.support.dev_gateway import DEV_KEY, DevGateway


class Mug(BaseModel):
    name: str
    price_usd: float


@pytest.fixture(scope="module")
def pydantic_ai():  # type: ignore[no-untyped-def]
    """Imported by the worker that runs this module, not at collection (every xdist
    worker collects every module)."""
    return pytest.importorskip("pydantic_ai")


@pytest.fixture(scope="module")
def model(pydantic_ai, dev: DevGateway):  # type: ignore[no-untyped-def]
    openai_models = pytest.importorskip("pydantic_ai.models.openai")
    openai_providers = pytest.importorskip("pydantic_ai.providers.openai")
    provider = openai_providers.OpenAIProvider(base_url=dev.base_url, api_key=DEV_KEY)
    return openai_models.OpenAIChatModel("auto", provider=provider)


def test_plain_text_run(pydantic_ai, model) -> None:  # type: ignore[no-untyped-def]
    result = pydantic_ai.Agent(model).run_sync("Hello")
    assert isinstance(result.output, str) and result.output


def test_typed_output_is_an_instance(pydantic_ai, model) -> None:  # type: ignore[no-untyped-def]
    result = pydantic_ai.Agent(model, output_type=Mug).run_sync("Describe a mug.")
    assert isinstance(result.output, Mug)


def test_the_agent_calls_its_tool_then_answers(pydantic_ai, model) -> None:  # type: ignore[no-untyped-def]
    agent = pydantic_ai.Agent(model)
    calls: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    result = agent.run_sync("What is the weather in Paris?")
    assert len(calls) == 1 and isinstance(result.output, str) and result.output


def test_a_streamed_run_yields_text(pydantic_ai, model) -> None:  # type: ignore[no-untyped-def]
    async def run() -> list[str]:
        async with pydantic_ai.Agent(model).run_stream("Count to five") as streamed:
            return [text async for text in streamed.stream_text(delta=True, debounce_by=None)]

    parts = asyncio.run(run())
    assert len(parts) > 1 and "".join(parts).strip()
