"""Property: any chat-chunk stream (text split anywhere, tool calls with their arguments
split anywhere and named late, any usage) becomes a Responses event stream that the
SDK's own stream state accepts, loses no text, argument or token, and ends in the same
Response as the non-streamed answer built from the same completion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response

from gateway.ingress.openai_responses import (
    ResponseContext,
    ResponsesStreamEncoder,
    decode,
    encode_response,
)
from gateway.usage import Usage
from tests.ingress.support import (
    ODD_CHOICES,
    comparable,
    finish_chunk,
    odd_chunk,
    parse_frames,
    replay,
    text_chunk,
    tool_chunk,
)

pieces = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5)


@st.composite
def chat_streams(draw: st.DrawFn) -> tuple[list[bytes], str, list[tuple[str, str, str]], Usage]:
    text = draw(st.lists(st.text(min_size=1, max_size=8), max_size=5))
    calls = []
    chunks = [text_chunk(piece) for piece in text]
    for index in range(draw(st.integers(0, 3))):
        name = draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
        arguments = draw(pieces)
        late_name = draw(st.booleans()) and len(arguments) > 1
        call_id = f"call_{index}"
        for n, piece in enumerate(arguments):
            named = (n == 1) if late_name else (n == 0)
            chunks.append(
                tool_chunk(
                    index,
                    call_id=call_id if n == 0 else None,
                    name=name if named else None,
                    arguments=piece,
                )
            )
        calls.append((call_id, name, "".join(arguments)))
    chunks.append(
        finish_chunk("tool_calls" if calls else draw(st.sampled_from(["stop", "length"])))
    )
    usage = Usage(
        input_tokens=draw(st.integers(0, 10_000)),
        output_tokens=draw(st.integers(0, 10_000)),
        cached_input_tokens=0,
        reasoning_tokens=0,
    )
    return chunks, "".join(text), calls, usage


def completion_of(text: str, calls: list[tuple[str, str, str]], finish: str) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    return json.dumps(body).encode()


@settings(max_examples=150, deadline=None)
@given(chat_streams())
def test_chat_streams_become_lossless_responses_streams(
    stream: tuple[list[bytes], str, list[tuple[str, str, str]], Usage],
) -> None:
    chunks, text, calls, usage = stream
    ctx = ResponseContext("resp_p", 1, "model", decode(b'{"model": "m", "input": "x"}').request)
    encoder = ResponsesStreamEncoder(ctx)
    frames = [frame for chunk in chunks for frame in encoder.feed(chunk)]
    frames += encoder.finish(usage, None)
    events = parse_frames(frames)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = replay(events)
    streamed_text = "".join(
        part.text
        for item in final.output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
    )
    assert streamed_text == text
    assert [
        (i.call_id, i.name, i.arguments) for i in final.output if i.type == "function_call"
    ] == calls
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        usage.input_tokens,
        usage.output_tokens,
    )
    finish = json.loads(chunks[-1])["choices"][0]["finish_reason"]
    whole = encode_response(completion_of(text, calls, finish), usage, ctx)
    assert comparable(final) == comparable(Response.model_validate(whole))


class EveryChunkReadWhole(ResponsesStreamEncoder):
    """The encoder without its fast path for text and arguments: every chunk read whole."""

    def _more_of_one(self, chunk: bytes) -> bytes | None:
        return None


def odd_choice(draw: st.DrawFn) -> dict[str, Any]:
    return draw(st.sampled_from(ODD_CHOICES))


@st.composite
def mixed_chunks(draw: st.DrawFn) -> list[bytes]:
    chunks: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["text", "text", "text", "tool", "odd", "two", "empty"]))
        if kind == "text":
            # quotes, backslashes, control characters and any plane: JSON escapes
            chunks.append(text_chunk(draw(st.text(min_size=1, max_size=6))))
        elif kind == "tool":
            index = draw(st.integers(0, 1))
            chunks.append(
                tool_chunk(
                    index,
                    call_id=f"call_{index}",
                    name=draw(st.sampled_from([None, "look", "write"])),
                    arguments=draw(st.text(max_size=4)),
                )
            )
        else:
            choices: list[Any] = {
                "odd": [odd_choice(draw)],
                "two": [odd_choice(draw), {"index": 0, "delta": {"content": "and"}}],
                "empty": [],
            }[kind]
            chunks.append(
                json.dumps({"object": "chat.completion.chunk", "choices": choices}).encode()
            )
    return chunks


def written(
    encoder: ResponsesStreamEncoder, chunks: list[bytes], usage: Usage
) -> tuple[list[bytes], str | None]:
    """The frames an encoder writes for `chunks` and its end, and the error that stopped
    it, if one did (a chunk neither path can read fails both the same way)."""
    frames: list[bytes] = []
    try:
        for chunk in chunks:
            frames += encoder.feed(chunk)
        frames += encoder.finish(usage, None)
    except Exception as error:
        return frames, repr(error)
    return frames, None


def assert_fast_path_writes_what_whole_reading_writes(
    chunks: list[bytes], reason: str | None
) -> None:
    """(Without a last finish chunk, a finish reason met on the way decides the end.)"""
    ctx = ResponseContext("resp_f", 1, "model", decode(b'{"model": "m", "input": "x"}').request)
    fast, whole = ResponsesStreamEncoder(ctx), EveryChunkReadWhole(ctx)
    if reason is not None:
        chunks = [*chunks, finish_chunk(reason)]
    usage = Usage(input_tokens=3, output_tokens=len(chunks))
    assert written(fast, chunks, usage) == written(whole, chunks, usage)
    assert fast.response == whole.response


@settings(max_examples=200, deadline=None)
@given(mixed_chunks(), st.sampled_from([None, "stop", "tool_calls"]))
def test_the_fast_path_writes_what_reading_every_chunk_whole_writes(
    chunks: list[bytes], reason: str | None
) -> None:
    assert_fast_path_writes_what_whole_reading_writes(chunks, reason)


@pytest.mark.parametrize("odd", ODD_CHOICES)
@pytest.mark.parametrize("beside", ["alone", "before another"])
def test_an_odd_chunk_within_open_text_is_read_as_ever(odd: dict[str, Any], beside: str) -> None:
    chunks = [text_chunk("so"), odd_chunk(odd, beside), text_chunk("on")]
    assert_fast_path_writes_what_whole_reading_writes(chunks, None)


@pytest.mark.parametrize("odd", ODD_CHOICES)
def test_an_odd_chunk_within_an_open_call_is_read_as_ever(odd: dict[str, Any]) -> None:
    chunks = [
        tool_chunk(0, call_id="call_0", name="look", arguments='{"a"'),
        odd_chunk(odd),
        tool_chunk(0, arguments=": 1}"),
        text_chunk("after"),
    ]
    assert_fast_path_writes_what_whole_reading_writes(chunks, None)


def test_arguments_before_the_name_wait_for_it_on_either_path() -> None:
    chunks = [
        tool_chunk(0, call_id="call_0", arguments='{"a"'),
        tool_chunk(0, arguments=": 1"),
        tool_chunk(0, name="look", arguments="}"),
        tool_chunk(0, arguments=""),
    ]
    assert_fast_path_writes_what_whole_reading_writes(chunks, "tool_calls")
