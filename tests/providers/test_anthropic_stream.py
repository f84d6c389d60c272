"""Anthropic stream events -> OpenAI chunks. Events are the SDK's RawMessageStreamEvent
types dumped to JSON; the property test cuts text and tool JSON at random points,
sprinkles `ping`s anywhere, and splits the SSE bytes across random network reads: what
the client assembles must equal the non-streaming translation of the same message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic import types as at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamRejected, UpstreamUnavailable
from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.sse import SSEEvent
from gateway.usage import Usage
from tests.fakes.anthropic_server import (
    events_to_sse,
    make_message,
    message_events,
    text_message,
    tool_message,
)
from tests.providers.support import (
    anthropic_target,
    assemble,
    completion_choices,
    make_call,
    run_stream,
    split_bytes,
    usage_chunk,
)

translation = AnthropicTranslation()
CALL = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})


def stream_of(message: at.Message, call: Any = CALL, **kwargs: Any) -> list[dict[str, Any]]:
    data = b"".join(events_to_sse(message_events(message, **kwargs)))
    return run_stream(translation.stream(call, anthropic_target()), [data])


def test_chunks_open_with_the_role_and_end_with_finish_then_usage() -> None:
    message = text_message(
        "Hello there, world", input_tokens=7, output_tokens=4, model="claude-sonnet-4-5-20250929"
    )
    chunks = stream_of(message)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    assert "".join(contents) == "Hello there, world"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert usage_chunk(chunks) == {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
    assert {c["id"] for c in chunks} == {"chatcmpl-req1"}
    # every chunk, the usage chunk too, names the served model as message_start did
    assert {c["model"] for c in chunks} == {"claude-sonnet-4-5-20250929"}


def test_tool_calls_stream_id_and_name_first_then_argument_fragments() -> None:
    message = tool_message([("toolu_1", "get_weather", {"city": "Paris", "unit": "C"})])
    chunks = stream_of(message, split=lambda s: [s[i : i + 5] for i in range(0, len(s), 5)])
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls[0] == {
        "index": 0,
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert all(set(c) == {"index", "function"} for c in calls[1:])
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"city": "Paris", "unit": "C"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_usage_is_known_from_message_start_for_an_abandoned_stream() -> None:
    stream = translation.stream(CALL, anthropic_target())
    events = message_events(text_message("partial", input_tokens=40, cache_read=60))
    stream.feed(SSEEvent(json.dumps(events[0]).encode(), "message_start"))
    assert stream.usage == Usage(input_tokens=100, cached_input_tokens=60, output_tokens=1)


def test_message_delta_usage_updates_the_running_usage() -> None:
    stream = translation.stream(CALL, anthropic_target())
    for event in message_events(text_message("x", input_tokens=3, output_tokens=9)):
        stream.feed(SSEEvent(json.dumps(event).encode(), event["type"]))
    assert stream.usage == Usage(input_tokens=3, output_tokens=9)


@pytest.mark.parametrize(
    ("error_type", "expected", "retryable"),
    [
        ("overloaded_error", UpstreamUnavailable, True),
        ("api_error", UpstreamUnavailable, True),
        ("rate_limit_error", UpstreamRejected, True),
        ("invalid_request_error", UpstreamRejected, False),
    ],
)
def test_an_error_event_raises_the_mapped_error(
    error_type: str, expected: type[Exception], retryable: bool
) -> None:
    stream = translation.stream(CALL, anthropic_target())
    first = message_events(text_message("x"))[0]
    stream.feed(SSEEvent(json.dumps(first).encode(), "message_start"))
    error = {"type": "error", "error": {"type": error_type, "message": "Overloaded"}}
    with pytest.raises(expected) as caught:
        stream.feed(SSEEvent(json.dumps(error).encode(), "error"))
    assert caught.value.retryable is retryable  # type: ignore[attr-defined]
    assert caught.value.provider == "claude-prod"  # type: ignore[attr-defined]


def test_the_forced_json_tool_streams_as_content() -> None:
    call = make_call(
        {
            "messages": [{"role": "user", "content": "json"}],
            "stream": True,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "out", "schema": {"type": "object"}},
            },
        }
    )
    chunks = stream_of(tool_message([("toolu_1", "out", {"a": [1, 2]})]), call)
    choice = assemble(chunks)[0]
    assert json.loads(choice["content"]) == {"a": [1, 2]}
    assert choice["tool_calls"] == {}
    assert choice["finish_reason"] == "stop"


def test_a_malformed_event_is_an_upstream_failure() -> None:
    stream = translation.stream(CALL, anthropic_target())
    with pytest.raises(UpstreamUnavailable):
        stream.feed(SSEEvent(b"{not json", "content_block_delta"))


# -- property: streaming and non-streaming agree, however the bytes arrive ------------

block_text = st.text(min_size=1, max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def messages(draw: st.DrawFn) -> at.Message:
    blocks: list[Any] = []
    if draw(st.booleans()):
        blocks.append(at.ThinkingBlock(type="thinking", thinking=draw(block_text), signature="s"))
    for _ in range(draw(st.integers(0, 2))):
        blocks.append(at.TextBlock(type="text", text=draw(block_text)))
    tools = draw(st.integers(0, 3))
    for n in range(tools):
        tool_input: dict[str, object] = draw(
            st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=3)
        )
        blocks.append(
            at.ToolUseBlock(type="tool_use", id=f"toolu_{n}", name=f"fn{n}", input=tool_input)
        )
    if not blocks:
        blocks.append(at.TextBlock(type="text", text=draw(block_text)))
    stop = (
        "tool_use" if tools else draw(st.sampled_from(["end_turn", "max_tokens", "stop_sequence"]))
    )
    usage = at.Usage(
        input_tokens=draw(st.integers(0, 10_000)),
        output_tokens=draw(st.integers(1, 10_000)),
        cache_read_input_tokens=draw(st.none() | st.integers(0, 10_000)),
        cache_creation_input_tokens=draw(st.none() | st.integers(0, 10_000)),
    )
    return make_message(blocks, stop_reason=stop, usage=usage)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=messages(),
    cut_seed=st.lists(st.integers(1, 7), min_size=1, max_size=10),
    pings=st.lists(st.integers(0, 40), max_size=4),
    byte_cuts=st.lists(st.integers(0, 100_000), max_size=30),
)
def test_streamed_and_whole_answers_agree_whatever_the_splits(
    message: at.Message, cut_seed: list[int], pings: list[int], byte_cuts: list[int]
) -> None:
    def split(text: str) -> list[str]:
        out, i, k = [], 0, 0
        while i < len(text):
            size = cut_seed[k % len(cut_seed)]
            out.append(text[i : i + size])
            i, k = i + size, k + 1
        return out or [text]

    data = b"".join(events_to_sse(message_events(message, split, pings=pings)))
    stream = translation.stream(CALL, anthropic_target())
    chunks = run_stream(stream, split_bytes(data, byte_cuts))
    whole = translation.parse_response(message.model_dump_json().encode(), CALL, anthropic_target())
    expected = completion_choices(whole.body)
    streamed = assemble(chunks)
    assert streamed.keys() == expected.keys() == {0}
    got, want = streamed[0], expected[0]
    assert (got["content"] or None) == (want["content"] or None)
    assert got["reasoning"] == want["reasoning"]
    assert got["finish_reason"] == want["finish_reason"]
    assert [
        (c["id"], c["name"], json.loads(c["arguments"])) for c in got["tool_calls"].values()
    ] == [(c["id"], c["name"], json.loads(c["arguments"])) for c in want["tool_calls"].values()]
    assert stream.usage == whole.usage
    assert usage_chunk(chunks) == json.loads(whole.body)["usage"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"


def test_an_abandoned_stream_keeps_the_text_its_usage_does_not_count_yet() -> None:
    stream = translation.stream(CALL, anthropic_target())
    message = tool_message([("toolu_1", "lookup", {"q": "gateway"})], text="Looking it up")
    events = message_events(message)
    closing = next(i for i, e in enumerate(events) if e["type"] == "message_delta")
    for event in events[:closing]:
        stream.feed(SSEEvent(json.dumps(event).encode(), event["type"]))
    assert stream.unreported_text == "Looking it up" + json.dumps({"q": "gateway"})
    for event in events[closing:]:
        stream.feed(SSEEvent(json.dumps(event).encode(), event["type"]))
    assert stream.unreported_text is None
