"""Responses in, OpenAI's /v1/responses out: the body goes on as sent (model renamed,
a stored conversation inlined), answers and events come back with the client's model
name and their usage read."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response
from pydantic import SecretStr

from gateway.errors import UpstreamRejected, UpstreamUnavailable
from gateway.providers.base import Target
from gateway.providers.openai_responses import (
    ResponsesPassthroughStream,
    build_request,
    map_error,
    parse_response,
    passthrough_body,
)
from gateway.providers.sse import SSEEvent
from gateway.settings.server import ProviderSettings


def target() -> Target:
    settings = ProviderSettings(kind="openai", api_key=SecretStr("sk-up"), base_url="http://o/v1")
    return Target("openai", settings, "gpt-4.1-2025-04-14", "http://o/v1")


def response(model: str = "gpt-4.1-2025-04-14", status: str = "completed") -> dict[str, object]:
    return {
        "id": "resp_up",
        "object": "response",
        "created_at": 1,
        "model": model,
        "status": status,
        "output": [
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "hi", "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 1},
            "total_tokens": 13,
        },
    }


def test_the_body_is_forwarded_with_only_the_model_changed() -> None:
    native = {"model": "smart", "input": "hi", "tools": [{"type": "web_search"}], "x_new": 1}
    body = passthrough_body(native, "gpt-4.1-2025-04-14")
    assert body == {**native, "model": "gpt-4.1-2025-04-14"}
    upstream = build_request(body, target(), "req-1")
    assert upstream.url == "http://o/v1/responses"
    assert upstream.headers["authorization"] == "Bearer sk-up"
    assert json.loads(upstream.body) == body


def test_a_gateway_previous_response_id_never_reaches_the_upstream() -> None:
    # the conversation stage has put the stored conversation into `input` already
    items = [
        {"type": "message", "role": "user", "content": "first"},
        {"type": "message", "role": "user", "content": "and?"},
    ]
    native = {"model": "smart", "input": items, "previous_response_id": "resp_gw"}
    body = passthrough_body(native, "up")
    assert "previous_response_id" not in body
    assert body["input"] == items


def test_the_answer_keeps_its_shape_with_the_served_model_and_usage() -> None:
    answer = response(model="gpt-4.1-snapshot")
    parsed, usage = parse_response(json.dumps(answer).encode(), target())
    assert Response.model_validate(parsed).model == "gpt-4.1-snapshot"
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (10, 4, 3)
    assert usage.reasoning_tokens == 1
    with pytest.raises(UpstreamUnavailable):
        parse_response(b'{"object": "chat.completion"}', target())


def test_stream_payloads_pass_through_and_the_final_response_is_kept() -> None:
    stream = ResponsesPassthroughStream("gpt-4.1")
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": response(status="in_progress"),
    }
    delta = {
        "type": "response.output_text.delta",
        "sequence_number": 1,
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "hi",
        "logprobs": [],
    }
    done = {"type": "response.completed", "sequence_number": 2, "response": response()}
    frames = []
    for payload in (created, delta, done):
        frames += stream.feed(SSEEvent(json.dumps(payload).encode(), payload["type"]))
    # a payload without a Response object goes on byte for byte
    assert frames[1] == json.dumps(delta).encode()
    first = json.loads(frames[0])
    # the served model as the upstream named it, not the deployment's id
    assert first["response"]["model"] == "gpt-4.1-2025-04-14"
    assert stream.response is not None and stream.response["model"] == "gpt-4.1-2025-04-14"
    assert stream.usage is not None and stream.usage.output_tokens == 3


def test_upstream_errors_map_as_for_openai_chat() -> None:
    error = map_error(400, b'{"error": {"message": "bad tool"}}', {}, target())
    assert isinstance(error, UpstreamRejected) and error.status == 400
    assert "bad tool" in error.message
