"""litellm as a client of `gateway dev` (the `openai/` prefix): plain, stream, tools,
structured output; it names (and could price) the served model."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from pydantic import BaseModel

from tests.support.dev_gateway import DEV_KEY, DevGateway

# litellm builds pydantic models that warn about ReadOnly TypedDict items at first use
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class Mug(BaseModel):
    name: str
    price_usd: float


@pytest.fixture(scope="module")
def litellm() -> Any:
    """Imported by the worker that runs this module, not at collection: every xdist worker
    collects every module, and litellm's import is seconds of CPU."""
    # litellm fetches its price map from the internet at import unless told not to
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return pytest.importorskip("litellm")


@pytest.fixture(scope="module")
def options(dev: DevGateway) -> dict[str, object]:
    return {"model": "openai/auto", "api_base": dev.base_url, "api_key": DEV_KEY, "timeout": 30}


def test_plain_completion_names_the_served_model(litellm: Any, options: dict[str, object]) -> None:
    reply = litellm.completion(messages=[{"role": "user", "content": "Hello"}], **options)
    assert reply.choices[0].message.content
    assert reply.model.endswith("emulated-llama-small")


def test_stream(litellm: Any, options: dict[str, object]) -> None:
    chunks = list(
        litellm.completion(
            messages=[{"role": "user", "content": "Count to five"}], stream=True, **options
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()


def test_tools(litellm: Any, options: dict[str, object]) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    reply = litellm.completion(
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[tool],
        **options,
    )
    calls = reply.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert "city" in json.loads(calls[0].function.arguments)


def test_structured_output(litellm: Any, options: dict[str, object]) -> None:
    reply = litellm.completion(
        messages=[{"role": "user", "content": "Describe a mug."}],
        response_format=Mug,
        **options,
    )
    Mug.model_validate_json(reply.choices[0].message.content)
