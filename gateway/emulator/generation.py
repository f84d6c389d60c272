"""What the emulated model answers: deterministic text, JSON, or one tool call.

The answer depends only on `--seed`, the request's `seed`, the choice's index and the
prompt text, so a repeated request gets the same reply and the same length. Text comes
from a ring of words shuffled by the seed; the prompt's CRC picks where in the ring the
reply starts and how long it is, within the configured output range. A reply is a list
of pieces, one per output token.

What it answers, in order:
- a tool call when `tool_choice` names a tool or is `required`; under `auto` (the
  default when tools are sent) when the last message is the user's and mentions a word of
  a tool's name or description (the first such tool), never right after a tool result;
- JSON for `response_format`: `json_schema` writes a value valid under the schema,
  `json_object` a value valid under the JSON schema the prompt quotes (as JSON-mode
  clients send it), or a small object if it quotes none;
- text otherwise.
Tool arguments are valid under the tool's `parameters` schema.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.emulator.structured import instance_of, json_object, schema_in_text
from gateway.wire.openai import (
    JSONSchemaFormat,
    NamedToolChoice,
    ResponseFormat,
    Tool,
    ToolChoice,
)

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
    # seeds the reply's logprobs (the same reply, the same logprobs)
    digest: int = 0

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
    response_format: ResponseFormat | None = None
    # the request's `seed` and the choice's index (`n` > 1) vary the reply
    seed: int | None = None
    index: int = 0
    # the last message's role and text decide whether `auto` calls a tool
    last_role: str = "user"
    last_text: str = ""


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
        if request.seed is not None or request.index:
            digest = zlib.crc32(f"{request.seed}:{request.index}".encode(), digest)
        tool = _chosen_tool(request)
        if tool is not None:
            return self._tool_reply(tool, digest, request.limit)
        document = self._document(request.response_format, digest, request.prompt)
        if document is not None:
            return self._json_reply(document, digest, request.limit)
        return self._text_reply(digest, request)

    def words(self, rng: random.Random) -> Callable[[int], str]:
        """`n` words from the ring at a place `rng` picks: the text inside JSON answers."""

        def take(count: int) -> str:
            start = rng.randrange(_RING_SIZE)
            return "".join(self._ring[(start + i) % _RING_SIZE] for i in range(count)).strip()

        return take

    def _document(
        self, response_format: ResponseFormat | None, digest: int, prompt: str
    ) -> str | None:
        if response_format is None or response_format.type == "text":
            return None
        rng = random.Random(digest)
        if response_format.type == "json_object":
            # JSON mode carries its schema, if any, in the prompt: follow it as a model would
            quoted = schema_in_text(prompt)
            words = self.words(rng)
            value: object = (
                json_object(rng, words) if quoted is None else instance_of(quoted, rng, words)
            )
        else:
            spec = response_format.json_schema
            schema = spec.schema if isinstance(spec, JSONSchemaFormat) else None
            value = instance_of(schema if isinstance(schema, dict) else {}, rng, self.words(rng))
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def _json_reply(self, document: str, digest: int, limit: int | None) -> Reply:
        pieces = _four_byte_pieces(document)
        if limit is not None and len(pieces) > limit:
            return Reply(pieces[:limit], "length", None, digest)
        return Reply(pieces, "stop", None, digest)

    def _text_reply(self, digest: int, request: ReplyRequest) -> Reply:
        length = self._min + digest % self._span
        reason = "stop"
        if request.limit is not None and (request.ignore_eos or length > request.limit):
            length, reason = request.limit, "length"
        pieces = self._pieces(digest % _RING_SIZE, length)
        if pieces and _asks_for_verdict(request.prompt):
            # a pairwise judge prompt (the gateway's online evaluation): the reply ends
            # with a verdict, drawn from the prompt, so dev mode shows labels being made
            pieces = (*pieces[:-1], _VERDICTS[digest % len(_VERDICTS)])
        if request.stop:
            cut = _cut_at_stop(pieces, request.stop)
            if cut is not None:
                return Reply(cut, "stop", None, digest)
        return Reply(pieces, reason, None, digest)

    def _pieces(self, start: int, length: int) -> tuple[str, ...]:
        ring = self._ring
        if start + length <= _RING_SIZE:
            pieces = ring[start : start + length]
        else:
            pieces = tuple(ring[(start + i) % _RING_SIZE] for i in range(length))
        # the first token of a reply carries no leading space
        return (pieces[0].lstrip(), *pieces[1:]) if pieces else pieces

    def _tool_reply(self, tool: Tool, digest: int, limit: int | None) -> Reply:
        rng = random.Random(digest)
        schema = tool.function.parameters
        value = instance_of(schema, rng, self.words(rng)) if isinstance(schema, dict) else {}
        arguments = json.dumps(
            value if isinstance(value, dict) else {}, separators=(",", ":"), ensure_ascii=False
        )
        call = PlannedToolCall(f"call_{digest:08x}", tool.function.name, arguments)
        # the first token names the function; the rest spell the arguments, 4 bytes apiece
        pieces = ("", *_four_byte_pieces(arguments))
        if limit is not None and len(pieces) > limit:
            return Reply(pieces[:limit], "length", call, digest)
        return Reply(pieces, "tool_calls", call, digest)


_VERDICTS = ("\n[[A]]", "\n[[B]]", "\n[[C]]")


def _asks_for_verdict(prompt: str) -> bool:
    return "[[A]]" in prompt and "[[B]]" in prompt and "[[C]]" in prompt


def _four_byte_pieces(text: str) -> tuple[str, ...]:
    return tuple(text[i : i + 4] for i in range(0, len(text), 4)) or ("",)


def _chosen_tool(request: ReplyRequest) -> Tool | None:
    tools, choice = request.tools, request.tool_choice
    if not tools or choice == "none":
        return None
    if isinstance(choice, NamedToolChoice):
        for tool in tools:
            if tool.function.name == choice.function.name:
                return tool
        return None
    if choice == "required":
        return _mentioned_tool(tools, request.last_text) or tools[0]
    # auto: a model calls a tool the user's message asks for, and answers after the result
    if request.last_role != "user":
        return None
    return _mentioned_tool(tools, request.last_text)


_WORD = re.compile(r"[a-z]{4,}")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def _mentioned_tool(tools: Sequence[Tool], text: str) -> Tool | None:
    said = set(_WORD.findall(text.lower()))
    for tool in tools:
        function = tool.function
        name = _CAMEL.sub(" ", function.name).replace("_", " ").replace("-", " ")
        described = function.description if isinstance(function.description, str) else ""
        if said & set(_WORD.findall(f"{name} {described}".lower())):
            return tool
    return None


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
