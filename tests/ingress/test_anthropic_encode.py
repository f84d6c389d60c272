"""The internal answer -> Anthropic's message, event stream and errors, each read back
with the `anthropic` SDK's own types (and its stream accumulator)."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message
from anthropic.types.shared import ErrorResponse

from gateway.errors import (
    AuthenticationFailed,
    BodyTooLarge,
    GatewayError,
    InternalError,
    InvalidRequest,
    NotFound,
    Overloaded,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.ingress import anthropic_messages as codec
from gateway.usage import Usage
from tests.ingress.anthropic_frames import accumulate, chunk, completion, parse_frames, split_frames

USAGE = Usage(input_tokens=120, cached_input_tokens=80, cache_write_tokens=30, output_tokens=9)


def encode(body: bytes, usage: Usage = USAGE) -> Message:
    return Message.model_validate_json(codec.encode_message(body, "req-1", "claude-x", usage))


def test_a_text_answer_is_a_message_under_the_served_model_with_anthropic_usage() -> None:
    message = encode(completion(content="Bonjour"))
    assert message.id == "msg_req-1"
    # the model the translated answer names (the served one), not the deployment id given
    assert message.model == "gpt-4.1"
    nameless = json.loads(completion(content="Bonjour"))
    del nameless["model"]
    assert encode(json.dumps(nameless).encode()).model == "claude-x"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Bonjour"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    # Anthropic counts input without cache reads and writes
    assert message.usage.input_tokens == 10
    assert message.usage.cache_read_input_tokens == 80
    assert message.usage.cache_creation_input_tokens == 30
    assert message.usage.output_tokens == 9


@pytest.mark.parametrize(
    ("request_id", "expected"),
    [
        ("req_1a2b", "msg_req_1a2b"),  # the gateway's own ids: as they are
        ("abc-def", "msg_abc-def"),
        ("1abc", "msg_1abc"),
        ("trace.7:a", "msg_trace_7_a"),  # a client's x-request-id may hold . and :
        ("r\u00e9q", "msg_r_q"),  # an identifier, but not ASCII
    ],
)
def test_a_message_id_is_the_request_id_with_unsafe_characters_replaced(
    request_id: str, expected: str
) -> None:
    assert codec.message_id(request_id) == expected


def test_tool_calls_become_tool_use_blocks_after_reasoning_and_text() -> None:
    body = completion(
        content="Checking.",
        reasoning="The user wants weather.",
        tool_calls=[("call_1", "get_weather", '{"city": "Paris"}'), ("call_2", "noop", "")],
        finish_reason="tool_calls",
    )
    message = encode(body)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, _, first, second = message.content
    assert thinking.thinking == "The user wants weather."  # type: ignore[union-attr]
    assert (first.id, first.name, first.input) == ("call_1", "get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert second.input == {}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")],
)
def test_finish_reasons_map_to_stop_reasons(finish: str, stop: str) -> None:
    assert encode(completion(finish_reason=finish)).stop_reason == stop


def test_arguments_that_are_not_an_object_are_kept_not_lost() -> None:
    body = completion(content=None, tool_calls=[("c", "f", "[1, 2")], finish_reason="tool_calls")
    assert encode(body).content[0].input == {"arguments": "[1, 2"}  # type: ignore[union-attr]


# -- stream --


def run(chunks: list[bytes], usage: Usage | None = USAGE) -> list[bytes]:
    encoder = codec.StreamEncoder("req-1", "claude-x")
    frames: list[bytes] = []
    for payload in chunks:
        frames.extend(split_frames(encoder.feed([payload])))
    frames.extend(encoder.finish([], usage, None))
    return frames


def test_a_text_stream_is_anthropics_event_sequence() -> None:
    frames = run(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
        ]
    )
    names = [name for name, _ in parse_frames(frames)]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = accumulate(frames)
    assert message.content[0].text == "Hello"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 10
    assert message.usage.cache_read_input_tokens == 80
    assert message.usage.output_tokens == 9


def test_reasoning_text_and_tool_calls_stream_as_separate_blocks() -> None:
    frames = run(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "think "}),
            chunk({"reasoning_content": "more"}),
            chunk({"content": "Let me look."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "search", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"cats"}'}}]}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "noop", "arguments": "{}"},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    deltas = [d["delta"]["type"] for n, d in parse_frames(frames) if n == "content_block_delta"]
    assert "input_json_delta" in deltas and "thinking_delta" in deltas
    message = accumulate(frames)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[0].thinking == "think more"  # type: ignore[union-attr]
    assert message.content[2].input == {"q": "cats"}  # type: ignore[union-attr]
    assert (message.content[3].id, message.content[3].input) == ("c2", {})  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    "finish", ["insufficient_system_resource", "abort", "eos"], ids=["deepseek", "vllm", "other"]
)
def test_a_chunk_with_a_finish_reason_outside_openais_list_keeps_its_text(finish: str) -> None:
    """DeepSeek ends a stream cut short for capacity with `insufficient_system_resource`,
    vLLM an aborted one with `abort`: the chunk's text still reaches the client, and the
    stop reason is the one Anthropic has for an end it has no name for."""
    frames = run([chunk({"content": "Hel"}), chunk({"content": "lo"}, finish)])
    message = accumulate(frames)
    assert [block.text for block in message.content if block.type == "text"] == ["Hello"]
    assert message.stop_reason == "end_turn"


def test_a_chunk_with_logprobs_keeps_its_text() -> None:
    with_logprobs = json.loads(chunk({"content": "lo"}))
    with_logprobs["choices"][0]["logprobs"] = {"content": [{"token": "lo", "logprob": -0.1}]}
    frames = run([chunk({"content": "Hel"}), json.dumps(with_logprobs).encode()])
    assert accumulate(frames).content[0].text == "Hello"  # type: ignore[union-attr]


def test_nulls_where_openai_leaves_a_field_out_keep_the_chunk() -> None:
    """What some OpenAI-compatible servers write in later chunks: a null role, a tool
    call's null id, type and name, a null delta beside the finish reason."""
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "look"}}
    more = {"index": 0, "id": None, "type": None, "function": {"name": None, "arguments": "{}"}}
    chunks = [
        chunk({"role": None, "content": "Hel"}),
        chunk({"role": None, "content": "lo"}),
        chunk({"tool_calls": [call]}),
        chunk({"tool_calls": [more]}),
    ]
    finish = json.loads(chunk({}, "tool_calls"))
    finish["choices"][0]["delta"] = None
    message = accumulate(run([*chunks, json.dumps(finish).encode()]))
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Hello"  # type: ignore[union-attr]
    assert message.content[1].name == "look" and message.content[1].input == {}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


def test_an_empty_upstream_stream_still_opens_and_closes_the_message() -> None:
    message = accumulate(run([], usage=None))
    assert message.content == []
    assert message.usage.output_tokens == 0


def test_a_failure_mid_stream_ends_with_an_error_event() -> None:
    encoder = codec.StreamEncoder("req-1", "claude-x")
    frames = split_frames(encoder.feed([chunk({"content": "partial"})]))
    frames += encoder.error(UpstreamUnavailable("upstream reset", provider="p"))
    assert encoder.finish([], None, None) == []
    name, data = parse_frames(frames)[-1]
    assert name == "error"
    ErrorResponse.model_validate(data)
    assert data["error"]["type"] == "api_error"


# -- errors --


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (InvalidRequest("bad", param="messages.0"), "invalid_request_error"),
        (AuthenticationFailed("no key"), "authentication_error"),
        (PermissionDenied("not yours"), "permission_error"),
        (NotFound("no model"), "not_found_error"),
        (BodyTooLarge("big"), "request_too_large"),
        (RateLimited("slow down"), "rate_limit_error"),
        (QuotaExceeded("budget"), "rate_limit_error"),
        (Overloaded("queue full"), "overloaded_error"),
        (UpstreamTimeout("slow", provider="p"), "timeout_error"),
        (UpstreamUnavailable("down", provider="p"), "api_error"),
        (InternalError("bug"), "api_error"),
        (
            UpstreamRejected("nope", status=400, provider="p", code="invalid_request_error"),
            "invalid_request_error",
        ),
        (UpstreamRejected("gone", status=404, provider="p"), "not_found_error"),
    ],
)
def test_every_error_has_anthropics_shape(error: GatewayError, error_type: str) -> None:
    body = json.loads(codec.error_body(error))
    if error_type != "request_too_large":  # Anthropic's documented 413 type; the SDK lacks it
        ErrorResponse.model_validate(body)
    assert body == {
        "type": "error",
        "error": {"type": error_type, "message": body["error"]["message"]},
    }
    assert error.message in body["error"]["message"]


def test_one_read_of_several_chunks_is_one_write_of_whole_frames() -> None:
    encoder = codec.StreamEncoder("req-1", "claude-x")
    one = encoder.feed([chunk({"role": "assistant", "content": ""}), chunk({"content": "a"})])
    assert [n for n, _ in parse_frames(split_frames(one))] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
    ]
    assert encoder.feed([]) == b""


def test_same_api_payloads_are_framed_under_their_own_event_names() -> None:
    encoder = codec.NativeStreamEncoder()
    payloads = [
        b'{"type":"ping"}',
        b'{"type": "message_stop"}',
        b'{"index":0,"type":"content_block_stop"}',
    ]
    frames = split_frames(encoder.feed(payloads))
    assert [n for n, _ in parse_frames(frames)] == ["ping", "message_stop", "content_block_stop"]
