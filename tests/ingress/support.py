"""Helpers for the ingress tests: chat chunks as upstreams send them, and the Responses
event stream read back through the official SDK's own types and stream state."""

from __future__ import annotations

import json
from typing import Any

from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

EVENT = TypeAdapter(ResponseStreamEvent)


def text_chunk(text: str, *, finish: str | None = None) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
        }
    ).encode()


def tool_chunk(
    index: int, *, call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> bytes:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
        }
    ).encode()


def finish_chunk(reason: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
        }
    ).encode()


def parse_frames(frames: list[bytes]) -> list[dict[str, Any]]:
    """SSE frames -> event payloads, checking each frame's `event:` names its type."""
    events = []
    for frame in frames:
        assert frame.endswith(b"\n\n"), frame
        head, _, data = frame.rstrip(b"\n").partition(b"\ndata: ")
        payload = json.loads(data)
        assert head == b"event: " + payload["type"].encode()
        events.append(payload)
    return events


def replay(events: list[dict[str, Any]]) -> Response:
    """The final Response the SDK's `responses.stream` helper builds from these events
    (it raises on a malformed sequence: unknown item, changed id, unfinished item)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final: Response | None = None
    for payload in events:
        event = EVENT.validate_python(payload)
        for handled in state.handle_event(event):
            # OpenAI ends a cut-short answer with response.incomplete instead
            if handled.type in ("response.completed", "response.incomplete"):
                final = handled.response
    assert final is not None, "no response.completed or response.incomplete event"
    return final


def comparable(response: Response) -> dict[str, Any]:
    """A response as JSON without what differs between two answers to the same request
    (ids, times) or between the SDK's parsed and plain models (`parsed`)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v) for k, v in value.items() if k != "id" and not k.startswith("parsed")
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    dumped = response.model_dump(mode="json")
    for volatile in ("created_at", "completed_at"):
        dumped.pop(volatile, None)
    result: dict[str, Any] = strip(dumped)
    return result


# chat chunk choices a stream encoder's fast path must leave to its general path, or write
# as that would: other choices, nulls, empty text, finish reasons, reasoning, tool calls
# more than one at once, named again, not seen, without arguments
ODD_CHOICES: list[dict[str, Any]] = [
    {"index": 1, "delta": {"content": "other choice"}},
    {"index": None, "delta": {"content": "null index"}},
    {"index": 0, "delta": None},
    {"index": 0, "delta": {"content": None}},
    {"index": 0, "delta": {"content": ""}},
    {"index": 0, "delta": {"content": "tail"}, "finish_reason": "length"},
    {"index": 0, "delta": {"content": "x", "tool_calls": []}},
    {
        "index": 0,
        "delta": {
            "content": "and a call",
            "tool_calls": [{"index": 0, "id": "call_0", "function": {"name": "look"}}],
        },
    },
    {"index": 0, "delta": {"role": "assistant", "content": "hi", "refusal": None}},
    {"delta": {"content": "no index"}, "logprobs": None},
    # tool calls: more than one at once, a name again, one not seen, no arguments, an end
    {
        "index": 0,
        "delta": {
            "tool_calls": [
                {"index": 0, "function": {"arguments": "a"}},
                {"index": 1, "function": {"arguments": "b"}},
            ]
        },
    },
    {
        "index": 0,
        "delta": {"tool_calls": [{"index": 0, "function": {"name": "x", "arguments": "n"}}]},
    },
    {"index": 0, "delta": {"tool_calls": [{"index": 5, "function": {"arguments": "unseen"}}]}},
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}},
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": None}}]}},
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": None}]}},
    {"index": 0, "delta": {"tool_calls": [{"index": 0}]}},
    {"index": 0, "delta": {"tool_calls": [{"index": None, "function": {"arguments": "i"}}]}},
    {"index": 0, "delta": {"tool_calls": [{"function": {"arguments": "no index"}}]}},
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 7}}]}},
    {
        "index": 0,
        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "e"}}]},
        "finish_reason": "tool_calls",
    },
    {
        "index": 0,
        "delta": {"content": "", "tool_calls": [{"index": 0, "function": {"arguments": "c"}}]},
    },
    {
        "index": 0,
        "delta": {"content": "t", "tool_calls": [{"index": 0, "function": {"arguments": "c"}}]},
    },
    # reasoning beside text or a call (what the Anthropic encoder writes as thinking)
    {"index": 0, "delta": {"content": "and", "reasoning_content": "why"}},
    {"index": 0, "delta": {"content": "and", "reasoning_content": ""}},
    {
        "index": 0,
        "delta": {
            "reasoning_content": "r",
            "tool_calls": [{"index": 0, "function": {"arguments": "c"}}],
        },
    },
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "only"}}]}},
]


def odd_chunk(odd: dict[str, Any], beside: str = "alone") -> bytes:
    """A chunk of `odd` alone, before a choice of text, or of no choices at all."""
    choices = {
        "alone": [odd],
        "before another": [odd, {"index": 0, "delta": {"content": "and"}}],
        "no choices": [],
    }[beside]
    return json.dumps({"object": "chat.completion.chunk", "choices": choices}).encode()
