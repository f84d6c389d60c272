"""Property: a random Anthropic event stream (text, thinking and tool JSON cut at random
points, pings anywhere, SSE bytes split across random network reads) translated to
OpenAI chunks by the Anthropic provider and back to Anthropic events by the ingress
codec is the same message for the SDK: same text, thinking, tool calls, stop reason
and usage. This is the path of a Messages client whose request went through chat."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from anthropic import types as at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.ingress import anthropic_messages as codec
from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.sse import SSEParser
from gateway.usage import Usage
from tests.fakes.anthropic_server import events_to_sse, make_message, message_events
from tests.ingress.anthropic_frames import accumulate, split_frames
from tests.ingress.support import ODD_CHOICES, odd_chunk
from tests.providers.support import anthropic_target, make_call, split_bytes

CALL = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def messages(draw: st.DrawFn) -> at.Message:
    blocks: list[Any] = []
    if draw(st.booleans()):
        blocks.append(at.ThinkingBlock(type="thinking", thinking=draw(text), signature="sig"))
    if draw(st.booleans()):
        blocks.append(at.TextBlock(type="text", text=draw(text)))
    for n in range(draw(st.integers(0, 3))):
        tool_input = draw(st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=4))
        name = draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
        blocks.append(
            at.ToolUseBlock(type="tool_use", id=f"toolu_{n}", name=name, input=tool_input)
        )
    usage = at.Usage(
        input_tokens=draw(st.integers(0, 10_000)),
        output_tokens=draw(st.integers(0, 10_000)),
        cache_read_input_tokens=draw(st.integers(0, 5_000)),
        cache_creation_input_tokens=draw(st.integers(0, 5_000)),
    )
    has_tools = any(b.type == "tool_use" for b in blocks)
    stop = "tool_use" if has_tools else draw(st.sampled_from(["end_turn", "max_tokens"]))
    return make_message(blocks, stop_reason=stop, usage=usage)


def cutter(cuts: list[int]) -> Any:
    def split(s: str) -> list[str]:
        points = sorted({c % (len(s) + 1) for c in cuts} | {0, len(s)})
        return [s[a:b] for a, b in itertools.pairwise(points) if s[a:b]]

    return split


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=messages(),
    text_cuts=st.lists(st.integers(0, 400), max_size=6),
    pings=st.lists(st.integers(0, 30), max_size=4),
    read_cuts=st.lists(st.integers(0, 20_000), max_size=12),
)
def test_anthropic_to_openai_and_back_keeps_the_message(
    message: at.Message, text_cuts: list[int], pings: list[int], read_cuts: list[int]
) -> None:
    events = message_events(message, cutter(text_cuts), pings=pings)
    data = b"".join(events_to_sse(events))
    upstream = AnthropicTranslation().stream(CALL, anthropic_target())
    encoder = codec.StreamEncoder("req-1", "claude-x")
    parser = SSEParser()
    frames: list[bytes] = []
    for read in split_bytes(data, read_cuts):
        payloads = [p for event in parser.feed(read) for p in upstream.feed(event)]
        frames.extend(split_frames(encoder.feed(payloads)))
    payloads = [p for event in parser.flush() for p in upstream.feed(event)]
    frames.extend(split_frames(encoder.feed(payloads)))
    frames.extend(encoder.finish(upstream.finish(), upstream.usage, None))

    back = accumulate(frames)

    def kinds(m: at.Message) -> dict[str, Any]:
        return {
            "text": "".join(b.text for b in m.content if b.type == "text"),
            "thinking": "".join(b.thinking for b in m.content if b.type == "thinking"),
            "tools": [(b.id, b.name, b.input) for b in m.content if b.type == "tool_use"],
        }

    assert kinds(back) == kinds(message)
    assert back.stop_reason == message.stop_reason
    for field in (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ):
        assert getattr(back.usage, field) == getattr(message.usage, field), field


class EveryChunkReadWhole(codec.StreamEncoder):
    """The encoder without its fast path for text and arguments: every chunk read whole."""

    def _more_of_one(self, parsed: Any) -> bytes | None:
        return None


def chunk(choices: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {"object": "chat.completion.chunk", "model": "m", "choices": choices}
    ).encode()


@st.composite
def openai_chunks(draw: st.DrawFn) -> list[bytes]:
    """Chat chunks of every kind the encoder meets, text most often: quotes, escapes and
    any plane in the text; thinking, tool calls, finishes, other choices between."""
    some_text = st.text(min_size=1, max_size=6)
    chunks: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["text", "text", "text", "thinking", "tool", "odd"]))
        if kind == "text":
            chunks.append(chunk([{"index": 0, "delta": {"content": draw(some_text)}}]))
        elif kind == "thinking":
            delta = {"reasoning_content": draw(some_text)}
            chunks.append(chunk([{"index": 0, "delta": delta}]))
        elif kind == "tool":
            index = draw(st.integers(0, 1))
            function = {"name": "look", "arguments": draw(st.text(max_size=4))}
            call = {"index": index, "id": f"call_{index}", "function": function}
            chunks.append(chunk([{"index": 0, "delta": {"tool_calls": [call]}}]))
        else:
            beside = draw(st.sampled_from(["alone", "before another", "no choices"]))
            chunks.append(odd_chunk(draw(st.sampled_from(ODD_CHOICES)), beside))
    return chunks


def assert_fast_path_writes_what_whole_reading_writes(
    chunks: list[bytes], reason: str | None
) -> None:
    if reason is not None:
        chunks = [*chunks, chunk([{"index": 0, "delta": {}, "finish_reason": reason}])]
    fast = codec.StreamEncoder("req-1", "claude-x")
    whole = EveryChunkReadWhole("req-1", "claude-x")
    usage = Usage(input_tokens=3, output_tokens=len(chunks))
    fast_frames = [fast.feed([c]) for c in chunks] + fast.finish([], usage, None)
    whole_frames = [whole.feed([c]) for c in chunks] + whole.finish([], usage, None)
    assert fast_frames == whole_frames


@settings(max_examples=200, deadline=None)
@given(openai_chunks(), st.sampled_from([None, "stop", "tool_calls"]))
def test_the_fast_path_writes_what_reading_every_chunk_whole_writes(
    chunks: list[bytes], reason: str | None
) -> None:
    assert_fast_path_writes_what_whole_reading_writes(chunks, reason)


@pytest.mark.parametrize("odd", ODD_CHOICES)
@pytest.mark.parametrize("beside", ["alone", "before another"])
def test_an_odd_chunk_within_open_text_is_read_as_ever(odd: dict[str, Any], beside: str) -> None:
    text_chunk = chunk([{"index": 0, "delta": {"content": "so"}}])
    chunks = [text_chunk, odd_chunk(odd, beside), text_chunk]
    assert_fast_path_writes_what_whole_reading_writes(chunks, None)


def test_a_chunk_of_no_choices_within_open_text_is_read_as_ever() -> None:
    text_chunk = chunk([{"index": 0, "delta": {"content": "so"}}])
    chunks = [text_chunk, odd_chunk({}, "no choices"), text_chunk]
    assert_fast_path_writes_what_whole_reading_writes(chunks, None)


@pytest.mark.parametrize("odd", ODD_CHOICES)
def test_an_odd_chunk_within_a_tool_call_is_read_as_ever(odd: dict[str, Any]) -> None:
    def arguments(text: str, name: str | None = None) -> bytes:
        function = {"arguments": text} if name is None else {"name": name, "arguments": text}
        call = {"index": 0, "id": "call_0", "function": function}
        return chunk([{"index": 0, "delta": {"tool_calls": [call]}}])

    chunks = [arguments('{"a"', name="look"), odd_chunk(odd), arguments(": 1}")]
    assert_fast_path_writes_what_whole_reading_writes(chunks, "tool_calls")
