"""The official openai SDK against the real gateway in front of a fake OpenAI upstream."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from tests.api.conftest import CLIENT_KEY
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess

USER = [{"role": "user", "content": "hello there gateway"}]


def test_non_streaming_completion_parses_and_names_what_served_it(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    raw = client.chat.completions.with_raw_response.create(model="fast-model", messages=USER)
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello there gateway"
    # `model` is the served model as the upstream named it; the route is in the header
    assert completion.model == "upstream-fast"
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    assert raw.headers["x-gateway-model"] == "fast-model"
    assert raw.headers["x-gateway-provider"] == "fake"
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.headers["x-gateway-route"].startswith("fast-model; served=fast-model")
    # 8 prompt tokens at $1/M + 4 completion tokens at $2/M
    assert raw.headers["x-gateway-cost-usd"] == "0.000016"
    assert fake.requests[-1].body["model"] == "upstream-fast"


def test_an_alias_is_answered_with_the_served_model_and_routed_under_the_alias(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    raw = client.chat.completions.with_raw_response.create(model="fast", messages=USER)
    assert raw.parse().model == "upstream-fast"
    assert raw.headers["x-gateway-route"].startswith("fast")
    assert fake.requests[-1].body["model"] == "upstream-fast"


def test_client_key_is_never_forwarded_and_provider_key_is_set(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    client.chat.completions.create(model="fast-model", messages=USER)
    headers = fake.requests[-1].headers
    assert headers["authorization"] == "Bearer sk-upstream-secret"
    assert CLIENT_KEY not in json.dumps(headers)


def test_request_id_is_propagated_when_given(client: openai.OpenAI, fake: OpenAIFake) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="fast-model", messages=USER, extra_headers={"x-request-id": "trace-123"}
    )
    assert raw.headers["x-request-id"] == "trace-123"
    assert fake.requests[-1].headers["x-request-id"] == "trace-123"


def test_unknown_fields_pass_through_to_the_upstream(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    client.chat.completions.create(
        model="fast-model", messages=USER, extra_body={"top_k": 5, "min_p": 0.1, "regex": "a+"}
    )
    body = fake.requests[-1].body
    assert (body["top_k"], body["min_p"], body["regex"]) == (5, 0.1, "a+")


def test_stream_without_usage_request_has_no_usage_chunk(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    stream = client.chat.completions.create(model="fast-model", messages=USER, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: hello there gateway"
    assert all(c.usage is None for c in chunks)
    # the same served-model name as a non-streamed answer carries
    assert all(c.model == "upstream-fast" for c in chunks)
    # the gateway always asks upstream for usage, to meter the stream
    assert fake.requests[-1].body["stream_options"] == {"include_usage": True}


def test_stream_with_include_usage_ends_with_usage_and_cost(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    stream = client.chat.completions.create(
        model="fast-model", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (8, 4)
    extension = last.model_extra or {}
    assert extension["x_gateway"]["cost_usd"] == "0.000016"
    assert extension["x_gateway"]["estimated"] is False


def test_tool_calls_pass_through_both_ways(client: openai.OpenAI, fake: OpenAIFake) -> None:
    tool_reply = {
        "id": "chatcmpl-tool",
        "object": "chat.completion",
        "created": 1,
        "model": "upstream-fast",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
    }
    fake.enqueue(Reply(body=tool_reply))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    completion = client.chat.completions.create(
        model="fast-model", messages=USER, tools=tools, tool_choice="auto"
    )
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert fake.requests[-1].body["tools"] == tools
    assert completion.model == "upstream-fast"


def test_models_lists_only_what_the_key_may_use(gateway: GatewayProcess) -> None:
    limited = openai.OpenAI(base_url=gateway.base_url, api_key="gw-test-key-limited")
    assert [m.id for m in limited.models.list()] == ["other-model"]
    full = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY)
    assert {m.id for m in full.models.list()} == {
        "fast-model",
        "fast",
        "other-model",
        "impatient-model",
    }


def test_retry_after_two_upstream_failures_calls_upstream_three_times(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(Reply.error(503, "busy"), Reply.error(502, "bad gateway"))
    raw = client.chat.completions.with_raw_response.create(model="fast-model", messages=USER)
    assert raw.parse().choices[0].message.content == "echo: hello there gateway"
    assert len(fake.requests) == 3


def test_two_hundred_concurrent_streams_all_complete(gateway: GatewayProcess) -> None:
    async def one(client: openai.AsyncOpenAI, i: int) -> str:
        stream = await client.chat.completions.create(
            model="fast-model",
            messages=[{"role": "user", "content": f"stream number {i}"}],
            stream=True,
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def main() -> list[str]:
        client = openai.AsyncOpenAI(
            base_url=gateway.base_url,
            api_key=CLIENT_KEY,
            max_retries=0,
            http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=200)),
        )
        async with client:
            return await asyncio.gather(*(one(client, i) for i in range(200)))

    texts = asyncio.run(main())
    assert texts == [f"echo: stream number {i}" for i in range(200)]


@pytest.mark.parametrize("include_usage", [False, True])
def test_async_client_streams(gateway: GatewayProcess, include_usage: bool) -> None:
    async def main() -> list[object]:
        async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY) as client:
            stream = await client.chat.completions.create(
                model="fast-model",
                messages=USER,
                stream=True,
                stream_options={"include_usage": include_usage},
            )
            return [c async for c in stream]

    chunks = asyncio.run(main())
    has_usage = any(getattr(c, "usage", None) is not None for c in chunks)
    assert has_usage is include_usage
