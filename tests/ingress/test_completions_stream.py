"""Legacy completions streamed from a chat-only upstream: each chat chunk re-written as a
text_completion chunk. A chunk that is one choice's text takes a fast path written from
a template; it must write what reading the chunk whole writes, byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.ingress.base import EncodeContext
from gateway.ingress.openai_completions import OpenAICompletionsCodec, _FromChatChunks
from gateway.usage import Usage


class EveryChunkReadWhole(_FromChatChunks):
    __slots__ = ()

    def _text_only(self, payload: bytes) -> bytes | None:
        return None


def context(request_id: str = "r1") -> EncodeContext:
    return EncodeContext(
        request_id=request_id, created=1700000000, model="deployed", wants_usage=True
    )


def chunk(choices: list[dict[str, Any]], **fields: Any) -> bytes:
    return json.dumps({"object": "chat.completion.chunk", **fields, "choices": choices}).encode()


def text(content: str, **fields: Any) -> bytes:
    return chunk([{"index": 0, "delta": {"content": content}, "finish_reason": None}], **fields)


# chunks the fast path must leave to the general one, or write as it would
ODD_CHUNKS = [
    chunk([{"index": 1, "delta": {"content": "other choice"}}]),
    chunk([{"index": None, "delta": {"content": "null index"}}]),
    chunk([{"delta": {"content": "no index"}}]),
    chunk([{"index": 0, "delta": None}]),
    chunk([{"index": 0, "delta": {"content": None}}]),
    chunk([{"index": 0, "delta": {"content": ""}}]),
    chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}]),
    chunk([{"index": 0, "delta": {"content": "tail"}, "finish_reason": "length"}]),
    chunk([{"index": 0, "delta": {"content": "tail"}, "finish_reason": ""}]),
    chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    chunk([{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]),
    chunk([]),
    chunk([{"index": 0, "delta": {"content": "named"}}], model="served-name"),
    chunk([{"index": 0, "delta": {"content": "unnamed"}}], model=""),
    chunk([{"index": 0, "delta": {"content": "odd name"}}], model={"not": "a name"}),
    chunk([{"index": 7, "delta": {"content": "seventh"}}]),
]


def both_ways(chunks: list[bytes], request_id: str = "r1") -> tuple[list[bytes], list[bytes]]:
    fast, whole = _FromChatChunks(context(request_id)), EveryChunkReadWhole(context(request_id))
    usage = Usage(input_tokens=3, output_tokens=len(chunks))
    fast_frames = [fast.feed([c]) for c in chunks] + fast.finish([], usage, None)
    whole_frames = [whole.feed([c]) for c in chunks] + whole.finish([], usage, None)
    return fast_frames, whole_frames


@pytest.mark.parametrize("odd", ODD_CHUNKS)
def test_an_odd_chunk_is_written_as_reading_it_whole_writes_it(odd: bytes) -> None:
    fast, whole = both_ways([text("so"), odd, text("on")])
    assert fast == whole


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            # quotes, backslashes, control characters and any plane: JSON escapes
            st.text(min_size=1, max_size=6).map(text),
            st.sampled_from(ODD_CHUNKS),
        ),
        min_size=1,
        max_size=10,
    ),
    st.text(min_size=1, max_size=8),
)
def test_any_stream_is_written_as_reading_every_chunk_whole_writes_it(
    chunks: list[bytes], request_id: str
) -> None:
    fast, whole = both_ways(chunks, request_id)
    assert fast == whole


def test_text_chunks_become_text_completion_chunks() -> None:
    encoder = OpenAICompletionsCodec().stream_encoder(False, context())
    body = encoder.feed([text('say "hi"\n'), text(" there", model="served-name")])
    frames = [frame for frame in body.split(b"\n\n") if frame]
    assert all(frame.startswith(b"data: {") for frame in frames)
    chunks = [json.loads(frame.removeprefix(b"data: ")) for frame in frames]
    assert [c["choices"] for c in chunks] == [
        [{"text": 'say "hi"\n', "index": 0, "logprobs": None, "finish_reason": None}],
        [{"text": " there", "index": 0, "logprobs": None, "finish_reason": None}],
    ]
    assert [c["model"] for c in chunks] == ["deployed", "served-name"]
    assert {(c["id"], c["object"], c["created"]) for c in chunks} == {
        ("cmpl-r1", "text_completion", 1700000000)
    }


def test_the_usage_chunk_names_the_model_the_last_text_chunk_named() -> None:
    fast, whole = both_ways([text("so"), text("on", model="served-name")])
    assert fast == whole
    usage_chunk = json.loads(fast[-2].removeprefix(b"data: "))
    assert usage_chunk["model"] == "served-name"
    assert usage_chunk["usage"]["completion_tokens"] == 2
