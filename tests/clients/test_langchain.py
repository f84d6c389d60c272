"""LangChain (`langchain-openai`) against `gateway dev`: invoke, stream, tools, structured
output, and the served model named in its metadata."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from tests.support.dev_gateway import DEV_KEY, DevGateway


class Mug(BaseModel):
    name: str
    price_usd: float = Field(ge=1, le=50)
    colours: list[str]


@pytest.fixture(scope="module")
def llm(dev: DevGateway):  # type: ignore[no-untyped-def]
    # imported by the worker that runs this module, not at collection (every xdist worker
    # collects every module)
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(
        model="auto", base_url=dev.base_url, api_key=DEV_KEY, max_retries=0, timeout=30
    )


def test_invoke_names_the_served_model(llm) -> None:  # type: ignore[no-untyped-def]
    answer = llm.invoke("Hello")
    assert isinstance(answer.content, str) and answer.content
    assert answer.response_metadata["model_name"] == "emulated-llama-small"
    assert answer.usage_metadata["output_tokens"] > 0


def test_stream_yields_the_text_in_chunks(llm) -> None:  # type: ignore[no-untyped-def]
    chunks = list(llm.stream("Count to five"))
    assert len(chunks) > 2
    assert "".join(str(c.content) for c in chunks).strip()


def test_bound_tools_are_called(llm) -> None:  # type: ignore[no-untyped-def]
    langchain_tools = pytest.importorskip("langchain_core.tools")

    @langchain_tools.tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"sunny in {city}"

    called = llm.bind_tools([get_weather]).invoke("What is the weather in Paris?")
    assert [call["name"] for call in called.tool_calls] == ["get_weather"]
    assert isinstance(called.tool_calls[0]["args"]["city"], str)


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_with_structured_output_returns_the_model(llm, method: str) -> None:  # type: ignore[no-untyped-def]
    if method == "json_mode":
        # JSON mode has no schema to follow: the emulator answers a generic object
        result = llm.with_structured_output(None, method="json_mode").invoke("JSON please")
        assert isinstance(result, dict)
        return
    result = llm.with_structured_output(Mug, method=method).invoke("Describe a mug.")
    assert isinstance(result, Mug)
