"""What the emulated model answers: deterministic text or one tool call.

The answer depends only on `--seed` and the prompt text, so a repeated request gets the
same reply and the same length. Text comes from a ring of words shuffled by the seed; the
prompt's CRC picks where in the ring the reply starts and how long it is, within the
configured output range. A reply is a list of pieces, one per output token.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.wire.openai import NamedToolChoice, Tool, ToolChoice

_WORDS = tuple(
    " ".join(
        (
            "the model answers with emulated tokens while the scheduler keeps every slot",
            "busy and the cache holds shared prefixes so repeated prompts skip their prefill",
            "work batching continuous requests decode one token per step across a running",
            "batch of sequences latency throughput memory pages eviction replica gateway",
            "routing policy budget quality price tenant stream usage limit queue health",
            "metrics signal prompt reply system user",
        )
    ).split(" ")
)
_RING_SIZE = 4096


@dataclass(frozen=True, slots=True)
class PlannedToolCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Reply:
    """One output token per piece; for a tool call the pieces are argument fragments."""

    pieces: tuple[str, ...]
    finish_reason: str
    tool_call: PlannedToolCall | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def tokens(self) -> int:
        return len(self.pieces)


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """The parts of a chat request that shape the reply."""

    prompt: str
    limit: int | None = None
    ignore_eos: bool = False
    stop: Sequence[str] = ()
    tools: Sequence[Tool] | None = None
    tool_choice: ToolChoice | None = None


class ReplyWriter:
    def __init__(self, seed: int, min_tokens: int, max_tokens: int) -> None:
        if not 1 <= min_tokens <= max_tokens:
            raise ValueError("output token range must satisfy 1 <= min <= max")
        self._seed = seed
        self._min = min_tokens
        self._span = max_tokens - min_tokens + 1
        rng = random.Random(seed)
        words = [rng.choice(_WORDS) for _ in range(_RING_SIZE)]
        self._ring = tuple(" " + word for word in words)

    def reply(self, request: ReplyRequest) -> Reply:
        digest = zlib.crc32(request.prompt.encode(), self._seed & 0xFFFFFFFF)
        tool = _forced_tool(request.tools, request.tool_choice)
        if tool is not None:
            return self._tool_reply(tool, digest, request.limit)
        return self._text_reply(digest, request)

    def _text_reply(self, digest: int, request: ReplyRequest) -> Reply:
        length = self._min + digest % self._span
        reason = "stop"
        if request.limit is not None and (request.ignore_eos or length > request.limit):
            length, reason = request.limit, "length"
        pieces = self._pieces(digest % _RING_SIZE, length)
        if request.stop:
            cut = _cut_at_stop(pieces, request.stop)
            if cut is not None:
                return Reply(cut, "stop")
        return Reply(pieces, reason)

    def _pieces(self, start: int, length: int) -> tuple[str, ...]:
        ring = self._ring
        if start + length <= _RING_SIZE:
            pieces = ring[start : start + length]
        else:
            pieces = tuple(ring[(start + i) % _RING_SIZE] for i in range(length))
        # the first token of a reply carries no leading space
        return (pieces[0].lstrip(), *pieces[1:]) if pieces else pieces

    def _tool_reply(self, tool: Tool, digest: int, limit: int | None) -> Reply:
        arguments = json.dumps(_arguments_for(tool.function.parameters), separators=(",", ":"))
        call = PlannedToolCall(f"call_{digest:08x}", tool.function.name, arguments)
        # the first token names the function; the rest spell the arguments, 4 bytes apiece
        pieces = ("", *(arguments[i : i + 4] for i in range(0, len(arguments), 4)))
        if limit is not None and len(pieces) > limit:
            return Reply(pieces[:limit], "length", call)
        return Reply(pieces, "tool_calls", call)


def _forced_tool(tools: Sequence[Tool] | None, choice: ToolChoice | None) -> Tool | None:
    if not tools:
        return None
    if isinstance(choice, NamedToolChoice):
        for tool in tools:
            if tool.function.name == choice.function.name:
                return tool
        return None
    if choice == "required":
        return tools[0]
    return None


_PLACEHOLDERS: dict[str, Any] = {
    "string": "emulated",
    "integer": 1,
    "number": 1.0,
    "boolean": True,
    "array": [],
    "object": {},
    "null": None,
}


def _arguments_for(schema: object) -> dict[str, Any]:
    """A placeholder for every required property of a JSON schema; `{}` if none."""
    if not isinstance(schema, dict):
        return {}
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, dict) or not isinstance(required, list):
        return {}
    arguments: dict[str, Any] = {}
    for key in required:
        spec = properties.get(key)
        if not isinstance(spec, dict):
            arguments[key] = None
            continue
        if isinstance(spec.get("enum"), list) and spec["enum"]:
            arguments[key] = spec["enum"][0]
            continue
        kind = spec.get("type")
        if kind == "object":
            arguments[key] = _arguments_for(spec)
        else:
            arguments[key] = _PLACEHOLDERS.get(kind if isinstance(kind, str) else "")
    return arguments


def _cut_at_stop(pieces: tuple[str, ...], stops: Sequence[str]) -> tuple[str, ...] | None:
    text = "".join(pieces)
    positions = [text.find(stop) for stop in stops if stop]
    hits = [p for p in positions if p >= 0]
    if not hits:
        return None
    cut = min(hits)
    kept: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > cut:
            if cut > used:
                kept.append(piece[: cut - used])
            break
        kept.append(piece)
        used += len(piece)
    return tuple(kept) if kept else ("",)
