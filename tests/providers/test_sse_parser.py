"""The SSE parser gives the same events however the network splits the stream, and the
same as the WHATWG rules read line by line (the reference below), whether the events take
its one-`data:`-line fast path or not."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.sse import SSEEvent, SSEParser


def reference(stream: bytes) -> list[SSEEvent]:
    """The event-stream rules, one line at a time, with no shortcut. A lone `\r` at the
    very end may be half of a `\r\n` still on its way: not a line end yet."""
    if stream.endswith(b"\r"):
        stream = stream[:-1]
    text = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events: list[SSEEvent] = []
    data: list[bytes] = []
    event: str | None = None
    last_id: str | None = None
    for line in text.split(b"\n")[:-1]:  # what follows the last line end is incomplete
        if not line:
            if data or event is not None:
                events.append(SSEEvent(b"\n".join(data), event, last_id))
            data, event = [], None
            continue
        if line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        elif name == b"id":
            last_id = value.decode("utf-8", "replace")
    return events


payload = st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))
line = st.one_of(
    payload.map(lambda p: b"data: " + p),
    payload.map(lambda p: b"data:" + p),
    payload.map(lambda p: b"event: " + p),
    payload.map(lambda p: b"id: " + p),
    payload.map(lambda p: b": " + p),
    st.just(b"data: [DONE]"),
    st.just(b'data: {"choices":[{"delta":{"content":"hi"}}]}'),
)
event = st.lists(line, min_size=1, max_size=3).map(lambda lines: b"\n".join(lines) + b"\n\n")
ending = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(event, max_size=8),
    ending=ending,
    blank_lines=st.integers(0, 2),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
def test_any_split_gives_the_reference_events(
    events: list[bytes], ending: bytes, blank_lines: int, cuts: list[int]
) -> None:
    stream = b"\n" * blank_lines + b"".join(events)
    stream = stream.replace(b"\n", ending)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    parser = SSEParser()
    got: list[SSEEvent] = []
    for start, end in itertools.pairwise(points):
        got += parser.feed(stream[start:end])
    assert got == reference(stream)


def test_the_common_stream_takes_one_read_whole() -> None:
    chunks = [b'{"choices":[{"delta":{"content":"%d"}}]}' % i for i in range(5)]
    stream = b"".join(b"data: " + c + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    parser = SSEParser()
    assert [e.data for e in parser.feed(stream)] == [*chunks, b"[DONE]"]
    # an event cut mid-way waits for its end
    assert parser.feed(b'data: {"a"') == []
    assert parser.feed(b":1}\n") == []
    assert parser.feed(b"\n") == [SSEEvent(b'{"a":1}')]
