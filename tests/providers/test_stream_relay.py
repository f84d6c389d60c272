"""Relaying a same-API stream's reads as they came gives the client the bytes, and the
gateway the counts, that taking every event apart gives: the SSE parser, the
OpenAI-compatible translation and the chat encoder each agree with their event-by-event
path on any read, however the network splits the stream."""

from __future__ import annotations

import itertools
import json

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamError
from gateway.ingress.base import EncodeContext
from gateway.ingress.openai_chat import ChatStreamEncoder
from gateway.providers.openai_compatible import OpenAICompatibleStream
from gateway.providers.sse import SSEEvent, SSEParser


def chunk(content: str | None, *, usage: object = "absent", spaced: bool = False) -> bytes:
    """An OpenAI chat.completion.chunk payload."""
    delta = {} if content is None else {"content": content}
    body: dict[str, object] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    if usage != "absent":
        body["usage"] = usage
    if spaced:
        return json.dumps(body).encode()
    return msgspec.json.encode(body)


USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}

payloads = st.one_of(
    st.builds(chunk, st.sampled_from(["", "word ", 'say "error"', "data: {x}", "\n"])),
    st.builds(chunk, st.just("hi"), usage=st.just(None), spaced=st.booleans()),
    st.builds(chunk, st.none(), usage=st.just(None)),
    st.just(b'{"id":"c","choices":[],"usage":%s}' % msgspec.json.encode(USAGE)),
    st.just(b'{"id":"c","choices":[{"index":0,"text":"legacy"}]}'),
    st.just(b'{"error":{"message":"overloaded"}}'),
    st.just(b"[DONE]"),
    st.just(b"not json"),
    st.just(b'{"choices":[]}  '),
)
events = st.lists(payloads, max_size=6).map(
    lambda ps: b"".join(b"data: " + p + b"\n\n" for p in ps)
)


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(
    stream=events,
    noise=st.sampled_from([b"", b": keep-alive\n\n", b"event: ping\ndata: {}\n\n", b"\r\n"]),
    cuts=st.lists(st.integers(0, 600), max_size=5),
)
def test_a_whole_data_read_is_what_its_events_frame_back_to(
    stream: bytes, noise: bytes, cuts: list[int]
) -> None:
    relaying, parsing = SSEParser(), SSEParser()
    for read in split(noise + stream, cuts):
        count = relaying.whole_data_events(read)
        got = parsing.feed(read)
        if count:
            assert len(got) == count
            assert all(e.event is None for e in got)
            assert b"".join(b"data: " + e.data + b"\n\n" for e in got) == read
        assert relaying.feed(read) == got  # the relaying parser still follows the stream


def run(
    reads: list[bytes], relay: bool, whole_chunks: bool = False
) -> tuple[list[bytes], OpenAICompatibleStream, str]:
    """What the client is sent for `reads`, the translation after them, and how it ended;
    with `whole_chunks`, each read came as one chunk of its own and is offered to
    `relay_one` framed, as the upstream's read callback offers it."""
    parser, translation, sent = SSEParser(), OpenAICompatibleStream("p"), []
    try:
        for read in reads:
            if whole_chunks and read and not parser.pending:
                framed = b"%X\r\n%b\r\n" % (len(read), read)
                start = framed.index(b"\r\n") + 2
                content = translation.relay_one(framed, start, len(framed) - 2)
                if content >= 0:
                    assert framed[start:-2] == read
                    translation.content_chunks += content
                    sent.append(read)
                    continue
            count = parser.whole_data_events(read) if relay else 0
            if count and translation.relay(read, count):
                sent.append(read)
                continue
            for event in parser.feed(read):
                sent.extend(b"data: " + p + b"\n\n" for p in translation.feed(event))
    except UpstreamError as error:
        return sent, translation, error.message
    return sent, translation, "end"


def assert_relaying_is_feeding(reads: list[bytes], whole_chunks: bool) -> None:
    relayed, relaying, relay_end = run(reads, relay=True, whole_chunks=whole_chunks)
    fed, feeding, feed_end = run(reads, relay=False)
    assert b"".join(relayed) == b"".join(fed)
    assert relay_end == feed_end
    assert relaying.content_chunks == feeding.content_chunks
    assert relaying.usage == feeding.usage
    assert relaying.finish() == feeding.finish()


@settings(max_examples=400, deadline=None)
@given(stream=events, cuts=st.lists(st.integers(0, 600), max_size=5))
def test_relaying_sends_and_counts_what_feeding_every_event_does(
    stream: bytes, cuts: list[int]
) -> None:
    assert_relaying_is_feeding(split(stream, cuts), whole_chunks=False)


@settings(max_examples=400, deadline=None)
@given(stream=events, cuts=st.lists(st.integers(0, 600), max_size=5))
def test_relaying_whole_chunks_sends_and_counts_what_feeding_every_event_does(
    stream: bytes, cuts: list[int]
) -> None:
    assert_relaying_is_feeding(split(stream, cuts), whole_chunks=True)


def test_one_whole_chunk_is_relayed_by_the_rules_for_one_event() -> None:
    translation = OpenAICompatibleStream("p")

    def relay_one(event: bytes) -> int:
        framed = b"%x\r\n%b\r\n" % (len(event), event)
        start = framed.index(b"\r\n") + 2
        return translation.relay_one(framed, start, len(framed) - 2)

    for spaced in (False, True):
        assert relay_one(b"data: " + chunk("word ", spaced=spaced) + b"\n\n") == 1
        assert relay_one(b"data: " + chunk("", spaced=spaced) + b"\n\n") == 0
        assert relay_one(b"data: " + chunk("a", usage=None, spaced=spaced) + b"\n\n") == 1
    assert relay_one(b"data: " + chunk(None) + b"\n\n") == 0
    assert relay_one(b'data: {"choices":[{"delta":{"content":null}}]}\n\n') == 0
    assert relay_one(b'data: {"choices":[{"index":0,"text":"legacy"}]}\n\n') == 1
    for held_back in (
        b"data: " + chunk(None, usage=USAGE) + b"\n\n",
        b'data: {"error":{"message":"x"}}\n\n',
        b"data: [DONE]\n\n",
        b"data: " + chunk("a") + b"\n\ndata: " + chunk("b") + b"\n\n",
        b"data: " + chunk("a") + b"\r\n\r\n",
        b"data: " + chunk("a") + b"\n",
        b"event: x\ndata: " + chunk("a") + b"\n\n",
    ):
        assert relay_one(held_back) == -1, held_back
    assert translation.content_chunks == 0  # the caller counts


def test_only_plain_chunks_are_relayed() -> None:
    translation = OpenAICompatibleStream("p")
    one = b"data: " + chunk("word ") + b"\n\n"
    assert translation.relay(one, 1)
    assert translation.relay(one * 3, 3)
    assert translation.content_chunks == 4
    # OpenAI's `"usage":null` on every chunk is no usage
    assert translation.relay(b"data: " + chunk("a", usage=None) + b"\n\n", 1)
    for held_back in (
        b"data: " + chunk(None, usage=USAGE) + b"\n\n",
        b'data: {"error":{"message":"x"}}\n\n',
        b"data: [DONE]\n\n",
        one + b"data: [DONE]\n\n",
    ):
        assert not translation.relay(held_back, held_back.count(b"\n\n"))
    assert translation.content_chunks == 5
    assert translation.usage is None


def test_a_stream_without_usage_names_the_model_of_its_last_relayed_chunk() -> None:
    ctx = EncodeContext("req-1", 1_700_000_000, "configured-model", wants_usage=True)
    fed, relayed = ChatStreamEncoder(ctx), ChatStreamEncoder(ctx)
    first, last = chunk("a"), chunk("b").replace(b"served-model", b"served-model-2")
    fed.feed([first, last])
    relayed.feed([first])
    relayed.relayed(b"data: " + first + b"\n\ndata: " + last + b"\n\n")
    assert fed.finish([], None, None) == relayed.finish([], None, None)
    assert b'"model":"served-model-2"' in relayed.finish([], None, None)[0]
    # a payload fed after the relayed frames is the last again
    relayed.feed([first])
    assert b'"model":"served-model"' in relayed.finish([], None, None)[0]


def test_a_relayed_read_is_one_event_when_its_only_line_end_ends_it() -> None:
    parser = SSEParser()
    assert parser.whole_data_events(b"data: {}\n\n") == 1
    assert parser.whole_data_events(b"data: {}\n\ndata: {}\n\n") == 2
    for not_whole in (
        b"",
        b"\n\n",
        b"data: ",
        b"data: {}\n",
        b"data: {}\n\n\n\n",
        b"data:{}\n\n",
        b"data: {}\r\n\r\n",
    ):
        assert parser.whole_data_events(not_whole) == 0
    parser.feed(b"data: {")
    assert parser.whole_data_events(b"data: {}\n\n") == 0  # a half event is held
    assert parser.feed(b"}\n\n") == [SSEEvent(b"{}")]
