"""An incremental Server-Sent Events parser: bytes in, whole events out, however the
network splits the stream."""

from __future__ import annotations

from dataclasses import dataclass

_LF = ord("\n")


@dataclass(slots=True)
class SSEEvent:
    data: bytes
    event: str | None = None
    id: str | None = None


class SSEParser:
    """Feed it byte chunks; it returns each event once its blank line arrives.

    Follows the WHATWG event-stream rules that matter for LLM APIs: `\\n`, `\\r\\n` or
    `\\r` line ends, `:` comments, multi-line `data` joined with `\\n`, one optional
    space after the colon.
    """

    __slots__ = ("_buffer", "_data", "_event", "_id", "pending")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event: str | None = None
        self._id: str | None = None
        # part of an event is held from an earlier read: the next read continues it
        self.pending = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if buffer.find(b"\r") >= 0:  # (not `in`: see whole_data_events)
            # a lone trailing \r may be the first half of \r\n: wait for the next read
            keep_cr = buffer.endswith(b"\r")
            if keep_cr:
                buffer = buffer[:-1]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buffer += b"\r"
        events: list[SSEEvent] = []
        start = 0
        if not self._data and self._event is None:
            # what LLM APIs send: events of one `data: ` line each; taken whole, without
            # the line-by-line walk (anything else falls through to it where it starts)
            while True:
                end = buffer.find(b"\n\n", start)
                if end < 0 or not buffer.startswith(b"data: ", start):
                    break
                if buffer.find(b"\n", start, end) >= 0:
                    break  # several lines in this event
                events.append(SSEEvent(buffer[start + 6 : end], None, self._id))
                start = end + 2
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = buffer[start:end]
            start = end + 1
            if not line:
                if self._data or self._event is not None:
                    events.append(SSEEvent(b"\n".join(self._data), self._event, self._id))
                self._data, self._event = [], None
                continue
            self._line(line)
        self._buffer = buffer[start:]
        self.pending = bool(self._buffer or self._data or self._event is not None)
        return events

    def whole_data_events(self, chunk: bytes) -> int:
        """How many events `chunk` is, when it is whole events of one `data: ` line each
        (what OpenAI-style servers send, one read at a time) and the parser holds nothing
        from an earlier read: such a read can be relayed as it came, without taking it
        apart. 0 for anything else, which goes to `feed`.

        A few C-level scans instead of `feed`'s per-event walk: every line end is half of
        a blank line, and every blank line but the last is followed by `data: `."""
        if self.pending:
            return 0
        # (a byte read by index is a small int: no object made, as a slice makes one;
        # and find, not `in`: on Python 3.11 `needle in bytes` first tries the needle as
        # an int, and makes and drops a TypeError with a formatted message, ~1,800
        # instructions, before it searches)
        if chunk[:6] != b"data: " or chunk[-1] != _LF or chunk[-2] != _LF or chunk.find(b"\r") >= 0:
            return 0
        if chunk.find(b"\n") == len(chunk) - 2:
            return 1  # one event: a paced stream's every read
        events = chunk.count(b"\n\n")
        if chunk.count(b"\n") != 2 * events or chunk.count(b"\n\ndata: ") != events - 1:
            return 0
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: an event without its final blank line still counts."""
        events = self.feed(b"\n\n") if self._buffer.strip() or self._data else []
        self._buffer = b""
        self.pending = bool(self._data or self._event is not None)
        return events

    def _line(self, line: bytes) -> None:
        if line.startswith(b":"):
            return
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            self._id = value.decode("utf-8", "replace")
