"""Anthropic Messages API translation: OpenAI chat in, `POST {base}/v1/messages` out,
and Anthropic's answers (body, stream events, errors) back as OpenAI shapes.

Choices that are not one-to-one, so users can predict them:

- `system` and `developer` messages, wherever they appear, become the top-level
  `system` text blocks in order; Anthropic has no system turns.
- `tool` messages become `tool_result` blocks in a user turn; consecutive turns with the
  same role are merged, because the API wants user and assistant to alternate.
- `max_tokens` is required by Anthropic: the client's `max_completion_tokens` or
  `max_tokens`, else the model's configured default (`Target.default_max_tokens`).
- `temperature` is clamped to Anthropic's 0..1 range. When both `temperature` and
  `top_p` are given only `temperature` is sent: current Claude models refuse both.
- `response_format` json_schema (and json_object, with an open object schema) becomes
  a forced tool: Anthropic guarantees a forced tool's input matches its schema on every
  Claude model, and the tool input comes back as the message content (JSON text) with
  finish_reason "stop", as OpenAI returns it. A schema whose root is not an object is
  wrapped in `{"value": ...}` and unwrapped on the way back. With client tools as well,
  `tool_choice` becomes "any" so the model either calls one of them or answers.
- Images: data URLs become base64 image blocks, http(s) URLs become `url` sources;
  PDF data URLs in `file` parts become document blocks. Audio is refused (400).
- `reasoning_content` of earlier assistant turns is dropped: Anthropic only accepts
  thinking blocks with the signature it issued. Thinking in answers becomes
  `reasoning_content`.
- `reasoning_effort` becomes extended thinking with a budget of 1024 (minimal), 2048
  (low), 8192 (medium) or 24576 (high) tokens, kept under `max_tokens` (which counts
  thinking, as OpenAI's does reasoning). Thinking is not asked for when `max_tokens` is
  1024 or less or a tool is forced (Anthropic refuses both combinations), and it drops
  `temperature` and a `top_p` under 0.95, which Anthropic refuses beside thinking.
  A model whose catalog entry does not list `reasoning` gets no thinking.
- Prompt caching: `cache_control` (`{"type": "ephemeral", "ttl": "5m" | "1h"}`, an
  extension of OpenAI's format) on a message, a content part or a tool becomes that
  block's Anthropic cache breakpoint. A request with none gets breakpoints after a tool
  list and after a system prompt of `AUTO_CACHE_CHARS` characters or more (the provider
  setting `prompt_cache: off` turns this off): those prefixes repeat across requests,
  and a cache read costs a tenth of the input price.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET

from gateway.errors import (
    InvalidRequest,
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.providers.base import Call, Target, Translated, UpstreamRequest
from gateway.providers.builtin_tools import plan_builtin_tools
from gateway.providers.dropped_fields import ANTHROPIC_CARRIED, dropped_fields
from gateway.providers.openai_out import (
    UNREADABLE,
    ChunkWriter,
    arguments_object,
    assistant_texts,
    checked_usage,
    completion_body,
    credentials_refused,
    function_tool_call,
    function_tools,
    parse_data_url,
    positive_output_limit,
    redact,
    unreadable,
)
from gateway.providers.retry_after import retry_after_seconds
from gateway.providers.sse import SSEEvent
from gateway.usage import Usage
from gateway.wire import anthropic as wire
from gateway.wire import openai
from gateway.wire.apis import OPENAI_CHAT
from gateway.wire.served_model import served_model

FINISH_REASONS: dict[str, openai.FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

# the status Anthropic uses for each error type, for errors that arrive inside a stream
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768}
MIN_THINKING_BUDGET = 1024
# ~1024 tokens, the smallest prefix Anthropic caches on Sonnet-class models
AUTO_CACHE_CHARS = 4096
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")
_DEFAULT_JSON_TOOL = "json_response"


# -- request ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonAnswerTool:
    """The forced tool standing in for `response_format`."""

    name: str
    input_schema: dict[str, Any]
    description: str
    # the schema's root was not an object: the answer is wrapped as {"value": ...}
    wrapped: bool


def json_answer_tool(request: openai.ChatRequest) -> JsonAnswerTool | None:
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    taken = {tool.function.name for tool in request.function_tools()}
    schema: dict[str, Any] = {"type": "object"}
    name, description = _DEFAULT_JSON_TOOL, "Answer with a JSON object."
    if fmt.type == "json_schema" and isinstance(fmt.json_schema, openai.JSONSchemaFormat):
        spec = fmt.json_schema
        if _TOOL_NAME.match(spec.name) and spec.name not in taken:
            name = spec.name
        if isinstance(spec.schema, dict):
            schema = spec.schema
        description = (
            spec.description
            if isinstance(spec.description, str)
            else "Answer with JSON that matches this schema."
        )
    wrapped = schema.get("type") != "object"
    if wrapped:
        schema = {"type": "object", "properties": {"value": schema}, "required": ["value"]}
    return JsonAnswerTool(name, schema, description, wrapped)


def messages_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base + "/messages" if base.endswith("/v1") else base + "/v1/messages"


def request_headers(target: Target) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    headers.update(target.settings.headers)
    headers["anthropic-version"] = target.settings.anthropic_version
    if target.settings.api_key is not None:
        headers["x-api-key"] = target.settings.api_key.get_secret_value()
    return headers


def to_messages_request(call: Call, target: Target) -> wire.MessagesRequest:
    """The Anthropic request for one OpenAI chat request (raises InvalidRequest for
    what Anthropic cannot express)."""
    request = call.request
    if request.n is not None and request.n > 1:
        raise InvalidRequest("Anthropic models return one choice; n must be 1", param="n")
    marks = cache_marks(call.raw)
    system, turns = convert_messages(request.messages, marks)
    if not turns:
        raise InvalidRequest("at least one user or assistant message is required", param="messages")
    body = wire.MessagesRequest(
        model=target.upstream_model,
        max_tokens=positive_output_limit(request, "Anthropic") or target.default_max_tokens,
        messages=turns,
    )
    if system:
        body.system = system
    if request.stop is not None:
        body.stop_sequences = request.stop_sequences()
    if request.temperature is not None:
        body.temperature = min(request.temperature, 1.0)
    elif request.top_p is not None:
        body.top_p = request.top_p
    if request.user:
        body.metadata = wire.Metadata(user_id=request.user)
    _add_tools(body, request)
    _mark_tools(body, call.raw)
    if not marks and target.settings.prompt_cache == "auto":
        _auto_cache(body)
    if target.reasoning:
        _add_thinking(body, call.raw.get("reasoning_effort"))
    if request.stream:
        body.stream = True
    return body


# (message index, content part index or None for the whole message) -> its breakpoint
CacheMarks = dict[tuple[int, int | None], wire.CacheControl]


def cache_marks(raw: Mapping[str, Any]) -> CacheMarks:
    """The `cache_control` extension on the client's messages and content parts."""
    marks: CacheMarks = {}
    messages = raw.get("messages")
    if not isinstance(messages, list):
        return marks
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if "cache_control" in message:
            marks[(i, None)] = _cache_control(message["cache_control"], f"messages[{i}]")
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and "cache_control" in part:
                    where = f"messages[{i}].content[{j}]"
                    marks[(i, j)] = _cache_control(part["cache_control"], where)
    return marks


def _cache_control(value: Any, param: str) -> wire.CacheControl:
    try:
        return msgspec.convert(value, wire.CacheControl)
    except msgspec.ValidationError:
        raise InvalidRequest(
            'cache_control must be {"type": "ephemeral"} with an optional "ttl" of "5m" or "1h"',
            param=f"{param}.cache_control",
        ) from None


def _mark(blocks: list[wire.ContentBlock], control: wire.CacheControl | None) -> None:
    """Put a breakpoint on the last block that can carry one."""
    if control is None:
        return
    for block in reversed(blocks):
        if not isinstance(block, (wire.ThinkingBlock, wire.RedactedThinkingBlock)):
            block.cache_control = control
            return


def _mark_tools(body: wire.MessagesRequest, raw: Mapping[str, Any]) -> None:
    tools = raw.get("tools")
    if not isinstance(tools, list) or not isinstance(body.tools, list):
        return
    for k, tool in enumerate(tools):
        if isinstance(tool, dict) and "cache_control" in tool and k < len(body.tools):
            body.tools[k].cache_control = _cache_control(tool["cache_control"], f"tools[{k}]")


def _auto_cache(body: wire.MessagesRequest) -> None:
    if isinstance(body.tools, list) and body.tools:
        size = sum(len(msgspec.json.encode(tool)) for tool in body.tools)
        if size >= AUTO_CACHE_CHARS:
            body.tools[-1].cache_control = wire.CacheControl()
    system = body.system if isinstance(body.system, list) else []
    if system and sum(len(block.text) for block in system) >= AUTO_CACHE_CHARS:
        system[-1].cache_control = wire.CacheControl()


def thinking_budget(effort: Any, max_tokens: int) -> int | None:
    """The thinking budget for OpenAI's `reasoning_effort`, or None for no thinking."""
    if effort is None or effort == "none":
        return None
    if effort not in THINKING_BUDGETS:
        raise InvalidRequest(
            f"reasoning_effort must be one of none, {', '.join(THINKING_BUDGETS)}",
            param="reasoning_effort",
        )
    if max_tokens <= MIN_THINKING_BUDGET:
        return None
    return min(THINKING_BUDGETS[effort], max_tokens - 1)


def _add_thinking(body: wire.MessagesRequest, effort: Any) -> None:
    budget = thinking_budget(effort, body.max_tokens)
    if budget is None or isinstance(body.tool_choice, (wire.ToolChoiceAny, wire.ToolChoiceTool)):
        return
    body.thinking = wire.ThinkingEnabled(budget_tokens=budget)
    body.temperature = UNSET
    if isinstance(body.top_p, float) and body.top_p < 0.95:
        body.top_p = UNSET


def convert_messages(
    messages: list[openai.Message], marks: CacheMarks | None = None
) -> tuple[list[wire.TextBlock], list[wire.MessageParam]]:
    marks = marks or {}
    system: list[wire.TextBlock] = []
    turns: list[wire.MessageParam] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        whole = marks.get((i, None))
        if message.role in ("system", "developer"):
            text = message.text()
            if text.strip():
                block = wire.TextBlock(text)
                parts = [m for (n, j), m in marks.items() if n == i and j is not None]
                control = whole or (parts[-1] if parts else None)
                if control is not None:
                    block.cache_control = control
                system.append(block)
            continue
        blocks: list[wire.ContentBlock]
        if message.role == "user":
            blocks = _user_blocks(message, param, marks, i)
            _mark(blocks, whole)
            _append(turns, "user", blocks)
        elif message.role == "assistant":
            blocks = _assistant_blocks(message, param)
            _mark(blocks, whole)
            _append(turns, "assistant", blocks)
        elif message.role == "tool":
            blocks = [_tool_result(message, param)]
            _mark(blocks, whole)
            _append(turns, "user", blocks)
        else:
            raise InvalidRequest(
                "the deprecated 'function' role is not supported; use 'tool' messages",
                param=f"{param}.role",
            )
    _trim_final_assistant(turns)
    return system, turns


def _append(turns: list[wire.MessageParam], role: str, blocks: list[wire.ContentBlock]) -> None:
    if not blocks:
        return
    if turns and turns[-1].role == role:
        if role == "user" and any(isinstance(b, wire.ToolResultBlock) for b in blocks):
            # tool results must open the user turn that answers the tool calls
            merged = [*turns[-1].content, *blocks]
            results: list[wire.ContentBlock] = [
                b for b in merged if isinstance(b, wire.ToolResultBlock)
            ]
            others: list[wire.ContentBlock] = [
                b for b in merged if not isinstance(b, wire.ToolResultBlock)
            ]
            turns[-1].content = results + others
        else:
            turns[-1].content.extend(blocks)
        return
    turns.append(wire.MessageParam(role="user" if role == "user" else "assistant", content=blocks))


def _trim_final_assistant(turns: list[wire.MessageParam]) -> None:
    """Anthropic refuses a final (prefill) assistant turn ending in whitespace."""
    if not turns or turns[-1].role != "assistant":
        return
    last = turns[-1].content
    if last and isinstance(last[-1], wire.TextBlock):
        stripped = last[-1].text.rstrip()
        if stripped:
            last[-1] = wire.TextBlock(stripped, cache_control=last[-1].cache_control)
        else:
            last.pop()
            if not last:
                turns.pop()


def _user_blocks(
    message: openai.Message, param: str, marks: CacheMarks, i: int
) -> list[wire.ContentBlock]:
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [wire.TextBlock(content)] if content.strip() else []
    blocks: list[wire.ContentBlock] = []
    for j, part in enumerate(content):
        where = f"{param}.content[{j}]"
        before = len(blocks)
        _user_part(part, where, blocks)
        if len(blocks) > before:
            _mark(blocks, marks.get((i, j)))
    return blocks


def _user_part(part: openai.ContentPart, where: str, blocks: list[wire.ContentBlock]) -> None:
    if isinstance(part, openai.TextPart):
        if part.text.strip():
            blocks.append(wire.TextBlock(part.text))
    elif isinstance(part, openai.ImagePart):
        blocks.append(wire.ImageBlock(_image_source(part.image_url.url, where)))
    elif isinstance(part, openai.FilePart):
        blocks.append(_document_block(part.file, where))
    elif isinstance(part, openai.RefusalPart):
        blocks.append(wire.TextBlock(part.refusal))
    else:
        raise InvalidRequest("Anthropic models do not accept audio input", param=where)


def _image_source(url: str, param: str) -> wire.Base64Source | wire.URLSource:
    if url.startswith(("http://", "https://")):
        return wire.URLSource(url)
    parsed = parse_data_url(url)
    if parsed is None:
        raise InvalidRequest(
            "image_url must be an http(s) URL or a base64 data URL", param=f"{param}.image_url"
        )
    media_type, data = parsed
    if media_type not in IMAGE_MEDIA_TYPES:
        raise InvalidRequest(
            f"Anthropic accepts {', '.join(IMAGE_MEDIA_TYPES)} images, not {media_type}",
            param=f"{param}.image_url",
        )
    return wire.Base64Source(media_type=media_type, data=data)


def _document_block(file: dict[str, Any], param: str) -> wire.DocumentBlock:
    parsed = parse_data_url(str(file.get("file_data") or ""))
    if parsed is None or parsed[0] != "application/pdf":
        raise InvalidRequest(
            "Anthropic accepts files only as PDF data URLs in file.file_data",
            param=f"{param}.file",
        )
    return wire.DocumentBlock(wire.Base64Source(media_type=parsed[0], data=parsed[1]))


def _assistant_blocks(message: openai.Message, param: str) -> list[wire.ContentBlock]:
    # Anthropic refuses text blocks that are empty or only whitespace
    blocks: list[wire.ContentBlock] = [
        wire.TextBlock(text) for text in assistant_texts(message) if text.strip()
    ]
    if isinstance(message.tool_calls, list):
        for k, any_call in enumerate(message.tool_calls):
            call = function_tool_call(any_call, f"{param}.tool_calls[{k}]", "Anthropic")
            arguments = arguments_object(
                call.function.arguments, f"{param}.tool_calls[{k}].function.arguments"
            )
            blocks.append(
                wire.ToolUseBlock(id=tool_use_id(call.id), name=call.function.name, input=arguments)
            )
    return blocks


def _tool_result(message: openai.Message, param: str) -> wire.ToolResultBlock:
    if not isinstance(message.tool_call_id, str):
        raise InvalidRequest("tool messages need a tool_call_id", param=f"{param}.tool_call_id")
    content: str | list[wire.TextBlock | wire.ImageBlock]
    if message.content is None or isinstance(message.content, str):
        content = message.content or ""
    else:
        content = []
        for j, part in enumerate(message.content):
            if isinstance(part, openai.TextPart) and part.text.strip():
                content.append(wire.TextBlock(part.text))
            elif isinstance(part, openai.ImagePart):
                where = f"{param}.content[{j}]"
                content.append(wire.ImageBlock(_image_source(part.image_url.url, where)))
    result = wire.ToolResultBlock(tool_use_id=tool_use_id(message.tool_call_id))
    empty = not content if isinstance(content, list) else not content.strip()
    if not empty:  # Anthropic refuses empty text; an empty result goes without content
        result.content = content
    return result


def tool_use_id(call_id: str) -> str:
    """Anthropic wants ids of `[a-zA-Z0-9_-]`; ids made elsewhere (Gemini's carry a
    base64 signature) are mapped to that alphabet, the same way for use and result."""
    return _UNSAFE_ID.sub("_", call_id) or "call"


def _add_tools(body: wire.MessagesRequest, request: openai.ChatRequest) -> None:
    function_list, choice = function_tools(request, "Anthropic")
    tools = [
        wire.ToolDefinition(
            name=tool.function.name,
            input_schema=(
                tool.function.parameters
                if isinstance(tool.function.parameters, dict)
                else {"type": "object", "properties": {}}
            ),
            description=tool.function.description,
        )
        for tool in function_list
    ]
    answer = json_answer_tool(request)
    if answer is not None and not isinstance(choice, openai.NamedToolChoice):
        tools.append(
            wire.ToolDefinition(answer.name, answer.input_schema, description=answer.description)
        )
        if tools[:-1] and choice != "none":
            choice = "required"
        else:
            choice = openai.NamedToolChoice(openai.NamedFunction(answer.name))
    if not tools:
        return
    body.tools = tools
    serial = True if request.parallel_tool_calls is False else UNSET
    if choice is None:
        if serial is not UNSET:
            body.tool_choice = wire.ToolChoiceAuto(disable_parallel_tool_use=serial)
    elif choice == "auto":
        body.tool_choice = wire.ToolChoiceAuto(disable_parallel_tool_use=serial)
    elif choice == "required":
        body.tool_choice = wire.ToolChoiceAny(disable_parallel_tool_use=serial)
    elif choice == "none":
        body.tool_choice = wire.ToolChoiceNone()
    else:
        body.tool_choice = wire.ToolChoiceTool(
            name=choice.function.name, disable_parallel_tool_use=serial
        )


# -- response -----------------------------------------------------------------------


def usage_from_anthropic(usage: wire.ResponseUsage | None) -> Usage:
    """Anthropic counts cache reads and writes beside `input_tokens`; ours includes them."""
    if usage is None:
        return Usage()
    cached = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    hour = usage.cache_creation.ephemeral_1h_input_tokens if usage.cache_creation else 0
    details = usage.output_tokens_details
    return Usage(
        input_tokens=(usage.input_tokens or 0) + cached + written,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        cache_write_1h_tokens=min(hour, written),
        output_tokens=usage.output_tokens or 0,
        reasoning_tokens=details.thinking_tokens if details is not None else 0,
    )


def _answer_text(tool_input: Any, answer: JsonAnswerTool) -> str:
    if answer.wrapped and isinstance(tool_input, dict):
        tool_input = tool_input.get("value")
    return msgspec.json.encode(tool_input).decode()


def to_choice(message: wire.Message, answer: JsonAnswerTool | None) -> openai.Choice:
    """The one OpenAI choice an Anthropic message makes."""
    texts: list[str] = []
    thinking: list[str] = []
    tool_calls: list[openai.ToolCall] = []
    answered = False
    for block in message.content:
        if block.type == "text" and block.text:
            texts.append(block.text)
        elif block.type == "thinking" and block.thinking:
            thinking.append(block.thinking)
        elif block.type == "tool_use" and block.name is not None:
            if answer is not None and block.name == answer.name:
                texts.append(_answer_text(block.input, answer))
                answered = True
                continue
            arguments = msgspec.json.encode(block.input if block.input is not None else {})
            tool_calls.append(
                openai.ToolCall(
                    id=block.id or f"call_{len(tool_calls)}",
                    function=openai.FunctionCall(name=block.name, arguments=arguments.decode()),
                )
            )
    finish = _finish_reason(message.stop_reason, has_tool_calls=bool(tool_calls))
    if answered and not tool_calls:
        finish = "stop"
    reply = openai.ResponseMessage(
        content="".join(texts) if texts or not tool_calls else None,
        tool_calls=tool_calls or UNSET,
        reasoning_content="".join(thinking) if thinking else UNSET,
    )
    return openai.Choice(index=0, message=reply, finish_reason=finish)


def _finish_reason(stop_reason: str | None, *, has_tool_calls: bool) -> openai.FinishReason:
    finish = FINISH_REASONS.get(stop_reason or "end_turn", "stop")
    if finish == "tool_calls" and not has_tool_calls:
        return "stop"
    return finish


# -- stream -------------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    kind: str  # text | tool | answer | thinking | other
    tool_index: int = -1
    buffered: str = ""


def event_text(event: wire.StreamEvent) -> str:
    """The generated text an event carries (text, thinking, tool-call JSON): what the
    output tokens of an abandoned stream are counted from."""
    delta, block = event.delta, event.content_block
    if event.type == "content_block_delta" and delta is not None:
        return delta.text or delta.thinking or delta.partial_json or ""
    if event.type == "content_block_start" and block is not None:
        return block.text or block.thinking or ""
    return ""


class AnthropicStream:
    """Anthropic stream events in, OpenAI `chat.completion.chunk` payloads out.

    Anthropic reports output tokens once, in the closing message_delta: the text
    streamed before it is kept, so a stream abandoned mid-way is billed for it."""

    # no per-chunk token estimate: the streamed text is counted instead
    content_chunks: int | None = None

    def __init__(self, call: Call, target: Target, answer: JsonAnswerTool | None) -> None:
        self.usage: Usage | None = None
        self._target = target
        self._answer = answer
        self._chunks = ChunkWriter(call, target.upstream_model)
        self._started = False
        self._finished = False
        self._blocks: dict[int, _Block] = {}
        self._tool_calls = 0
        self._answered = False
        self._raw_usage = wire.ResponseUsage()
        self._unreported: list[str] = []

    @property
    def unreported_text(self) -> str | None:
        return "".join(self._unreported) if self._unreported else None

    def feed(self, event: SSEEvent) -> list[bytes]:
        if not event.data or event.event == "ping":
            return []
        try:
            parsed = wire.event_decoder.decode(event.data)
        except UNREADABLE:
            raise unreadable(self._target, "a malformed stream event") from None
        kind = parsed.type
        if kind == "error":
            error = parsed.error or wire.ErrorObject()
            raise error_from_anthropic(
                ERROR_STATUS.get(error.type, 500), error.type, error.message, {}, self._target
            )
        if kind == "message_start":
            if parsed.message is not None:
                self._merge_usage(parsed.message.usage)
                self._chunks.model = served_model(parsed.message.model, self._chunks.model)
            return self._start()
        if kind == "content_block_start" and parsed.content_block is not None:
            self._unreported.append(event_text(parsed))
            return self._block_start(parsed.index or 0, parsed.content_block)
        if kind == "content_block_delta" and parsed.delta is not None:
            self._unreported.append(event_text(parsed))
            return self._block_delta(parsed.index or 0, parsed.delta)
        if kind == "content_block_stop":
            return self._block_stop(parsed.index or 0)
        if kind == "message_delta":
            if parsed.usage is not None:
                # its output count is cumulative: it covers everything streamed so far
                self._unreported.clear()
            self._merge_usage(parsed.usage)
            if parsed.delta is not None and parsed.delta.stop_reason is not None:
                return self._finish_chunk(parsed.delta.stop_reason)
        return []

    def finish(self) -> list[bytes]:
        return [self._chunks.usage(self.usage)]

    def _merge_usage(self, usage: wire.ResponseUsage | None) -> None:
        if usage is None:
            return
        raw = self._raw_usage
        for field in wire.ResponseUsage.__struct_fields__:
            value = getattr(usage, field)
            if value is not None:
                setattr(raw, field, value)
        self.usage = checked_usage(usage_from_anthropic(raw), self._target.provider)

    def _chunk(self, delta: openai.Delta, finish: openai.FinishReason | None = None) -> bytes:
        return self._chunks.delta(delta, finish)

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return [self._chunk(openai.Delta(role="assistant", content=""))]

    def _block_start(self, index: int, block: wire.ResponseBlock) -> list[bytes]:
        out = self._start()
        if block.type == "text":
            self._blocks[index] = _Block("text")
            if block.text:
                out.append(self._chunk(openai.Delta(content=block.text)))
        elif block.type == "thinking":
            self._blocks[index] = _Block("thinking")
            if block.thinking:
                out.append(self._chunk(openai.Delta(reasoning_content=block.thinking)))
        elif block.type == "tool_use" and self._answer and block.name == self._answer.name:
            self._blocks[index] = _Block("answer")
            self._answered = True
        elif block.type == "tool_use":
            tool_index = self._tool_calls
            self._tool_calls += 1
            self._blocks[index] = _Block("tool", tool_index)
            call = openai.ChunkToolCall(
                index=tool_index,
                id=block.id or f"call_{tool_index}",
                type="function",
                function=openai.ChunkFunctionCall(name=block.name or "", arguments=""),
            )
            out.append(self._chunk(openai.Delta(tool_calls=[call])))
        else:
            self._blocks[index] = _Block("other")
        return out

    def _block_delta(self, index: int, delta: wire.EventDelta) -> list[bytes]:
        block = self._blocks.get(index)
        if block is None:
            return []
        out = self._start()
        if block.kind == "text" and delta.text:
            out.append(self._chunk(openai.Delta(content=delta.text)))
        elif block.kind == "thinking" and delta.thinking:
            out.append(self._chunk(openai.Delta(reasoning_content=delta.thinking)))
        elif block.kind == "tool" and delta.partial_json:
            call = openai.ChunkToolCall(
                index=block.tool_index,
                function=openai.ChunkFunctionCall(arguments=delta.partial_json),
            )
            out.append(self._chunk(openai.Delta(tool_calls=[call])))
        elif block.kind == "answer" and delta.partial_json:
            assert self._answer is not None
            if self._answer.wrapped:
                block.buffered += delta.partial_json
            else:
                out.append(self._chunk(openai.Delta(content=delta.partial_json)))
        return out

    def _block_stop(self, index: int) -> list[bytes]:
        block = self._blocks.get(index)
        if block is None or block.kind != "answer" or self._answer is None:
            return []
        if not self._answer.wrapped:
            return []
        try:
            tool_input = msgspec.json.decode(block.buffered or "{}")
        except UNREADABLE:
            tool_input = {}
        return [self._chunk(openai.Delta(content=_answer_text(tool_input, self._answer)))]

    def _finish_chunk(self, stop_reason: str) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        finish = _finish_reason(stop_reason, has_tool_calls=self._tool_calls > 0)
        if self._answered and not self._tool_calls:
            finish = "stop"
        return [*self._start(), self._chunk(openai.Delta(), finish)]


# -- errors -------------------------------------------------------------------------


# Anthropic names the refused field at the start of its message: "max_tokens: 200000 >
# 64000, ...", "messages.1.content.0.type: Field required"
_NAMED_FIELD = re.compile(r"([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*): ")


def error_from_anthropic(
    status: int, error_type: str, message: str, headers: Mapping[str, str], target: Target
) -> UpstreamError:
    provider = target.provider
    message = redact(message, target) or f"HTTP {status}"
    retry_after = retry_after_seconds(headers)
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        detail = f"{error_type}: {message}"
        return credentials_refused("Anthropic", target, detail, status, "ANTHROPIC_API_KEY")
    if status == 402 or error_type == "billing_error":
        return UpstreamMisconfigured(
            f"Anthropic refused provider '{provider}' for billing reasons ({message}); "
            "check the Anthropic account behind its api_key.",
            provider=provider,
            upstream_status=status,
        )
    if status == 429 or error_type == "rate_limit_error":
        return UpstreamRejected(
            f"Anthropic rate limit for provider '{provider}': {message}",
            status=429,
            provider=provider,
            retryable=True,
            retry_after=retry_after,
            code=error_type,
        )
    if status in (408, 504) or error_type == "timeout_error":
        return UpstreamTimeout(
            f"Anthropic timed out for provider '{provider}': {message}",
            provider=provider,
            upstream_status=status,
            retry_after=retry_after,
        )
    if 400 <= status < 500:
        named = _NAMED_FIELD.match(message)
        return UpstreamRejected(
            message,
            status=status,
            provider=provider,
            retryable=False,
            code=error_type,
            param=named.group(1) if named else None,
        )
    return UpstreamUnavailable(
        f"Anthropic failed for provider '{provider}' ({status} {error_type}): {message}",
        provider=provider,
        upstream_status=status,
        retry_after=retry_after,
    )


# -- the translation ----------------------------------------------------------------

# a client's web search (Responses `web_search`), as Anthropic's server tool
WEB_SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search"}


class AnthropicTranslation:
    api = OPENAI_CHAT

    def build_request(self, call: Call, target: Target) -> UpstreamRequest:
        body = to_messages_request(call, target)
        builtin = plan_builtin_tools(call, target, (WEB_SEARCH_TOOL["type"],))
        encoded = msgspec.json.encode(body)
        if builtin is not None and builtin.web_search:
            # Anthropic's own web search runs beside the client's tools
            with_search = msgspec.json.decode(encoded)
            with_search.setdefault("tools", []).append(dict(WEB_SEARCH_TOOL))
            encoded = msgspec.json.encode(with_search)
        return UpstreamRequest(
            url=messages_url(target.base_url),
            body=encoded,
            headers=request_headers(target),
            stream=call.request.stream,
            changes=dropped_fields(call.raw, ANTHROPIC_CARRIED)
            + (builtin.changes if builtin is not None else []),
        )

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated:
        try:
            message = wire.message_decoder.decode(body)
        except UNREADABLE:
            raise unreadable(target, "a body that is not an Anthropic message") from None
        usage = checked_usage(usage_from_anthropic(message.usage), target.provider)
        choice = to_choice(message, json_answer_tool(call.request))
        model = served_model(message.model, target.upstream_model)
        return Translated(completion_body(call, [choice], usage, model), usage)

    def stream(self, call: Call, target: Target) -> AnthropicStream:
        return AnthropicStream(call, target, json_answer_tool(call.request))

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        try:
            error = wire.error_decoder.decode(body).error
        except UNREADABLE:
            text = body[:200].decode("utf-8", "replace").strip()
            error = wire.ErrorObject(type=_type_for_status(status), message=text)
        return error_from_anthropic(status, error.type, error.message, headers, target)


def _type_for_status(status: int) -> str:
    for error_type, error_status in ERROR_STATUS.items():
        if error_status == status:
            return error_type
    return "api_error"
