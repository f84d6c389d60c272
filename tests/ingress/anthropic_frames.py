"""Helpers for the Anthropic ingress tests: reading our SSE frames back as the
`anthropic` SDK does (its own event types and accumulator), and building the
`chat.completion` bodies the internal pipeline hands the codec."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pydantic
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent

from gateway.providers.sse import SSEParser

_events = pydantic.TypeAdapter(RawMessageStreamEvent)


def split_frames(data: bytes) -> list[bytes]:
    """One write of SSE bytes as its frames (each ends with a blank line)."""
    assert not data or data.endswith(b"\n\n"), data[-40:]
    return [part + b"\n\n" for part in data.split(b"\n\n") if part]


def parse_frames(frames: Iterable[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) per SSE frame; each frame must be one whole event whose name
    matches its data's `type`."""
    out: list[tuple[str, dict[str, Any]]] = []
    for frame in frames:
        parser = SSEParser()
        events = parser.feed(frame)
        assert len(events) == 1, f"not one whole event: {frame!r}"
        event = events[0]
        data = json.loads(event.data)
        assert event.event == data["type"], frame
        out.append((event.event, data))
    return out


def accumulate(frames: Iterable[bytes]) -> Message:
    """The Message the SDK builds from the stream; every event validates as the SDK's
    RawMessageStreamEvent (ping has no SDK type and is checked by shape)."""
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    names = []
    for name, data in parse_frames(frames):
        names.append(name)
        if name == "ping":
            assert data == {"type": "ping"}
            continue
        assert name != "error", data
        event = _events.validate_python(data)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    return Message.model_validate(snapshot.model_dump())


def completion(
    *,
    content: str | None = "hello",
    tool_calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    reasoning: str | None = None,
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = None,
) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return json.dumps(body).encode()


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return json.dumps(body).encode()
