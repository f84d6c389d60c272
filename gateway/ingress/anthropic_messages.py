"""The Anthropic Messages API as an ingress (`POST /v1/messages`): the client's body in,
the internal request (OpenAI chat semantics) out; the internal answer (a
`chat.completion` body or `chat.completion.chunk` payloads) back as Anthropic's message
or event stream; every error in Anthropic's shape.

When the upstream is Anthropic itself the client's body is forwarded as it came (see
providers/anthropic_native.py) and only decode and the errors of this module are used.
Across APIs the choices that are not one-to-one, so users can predict them:

- `system` (a string or text blocks) becomes one system message, blocks joined by a
  blank line. `cache_control` markers are Anthropic's prompt-cache hints: other
  upstreams cache on their own, so the markers are not sent to them.
- `tool_result` blocks become `tool` messages, placed before the rest of their user turn
  as OpenAI requires; an `is_error` result's text is prefixed with "Error: ".
  `tool_use` blocks become the assistant's `tool_calls`, input as the JSON arguments.
- `thinking` / `redacted_thinking` blocks of earlier assistant turns are not sent to
  other upstreams: their signatures mean nothing there, and Anthropic itself drops
  earlier turns' thinking from the context.
- `thinking: {type: enabled, budget_tokens}` becomes `reasoning_effort` (under 4096
  tokens "low", under 16384 "medium", else "high"; `adaptive` is "medium"), which the
  provider translations map to their own reasoning settings. Reasoning that comes back
  (`reasoning_content`) becomes thinking blocks with an empty signature.
- Images (base64 or URL) become `image_url` parts; base64 PDFs become `file` parts, text
  documents become text. `top_k` is kept as the `top_k` extension SGLang and vLLM read.
- `output_config.effort` (low, medium, high, max) becomes `reasoning_effort` (max is
  "high"), over what `thinking` says; `output_config.format` (a JSON schema) becomes a
  strict `json_schema` response_format. `system` turns mid-conversation (Anthropic's
  mid-conversation-system beta) become system messages in place.
- `anthropic-beta` values mean nothing to another API: they are dropped, and so is
  `context_management` (the context-management beta's field: Claude Code sends it on
  every turn); `x-gateway-route` names both (`changed=dropped-beta:...,dropped:...`).
- Server tools (`web_search_*`, `bash_*`, ...), MCP servers, containers and block
  types with no chat form are refused with a 400 naming the field
  (`check_translatable`): never dropped silently.
- Stop reasons: stop -> end_turn, length -> max_tokens, tool_calls -> tool_use,
  content_filter -> refusal. Usage is reported Anthropic's way: `input_tokens` without
  cache reads and writes, which have their own fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeVar

import msgspec

from gateway.authorization import bearer_token
from gateway.errors import (
    AuthenticationFailed,
    BodyTooLarge,
    GatewayError,
    InvalidRequest,
    NotFound,
    Overloaded,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from gateway.ingress.base import Decoded, EncodeContext
from gateway.json_body import (
    DEFAULT_MAX_DEPTH,
    decode_json_object,
    deeper_than,
    more_brackets_than,
)
from gateway.tokens import count_prompt
from gateway.usage import Usage
from gateway.wire import anthropic as wire
from gateway.wire import openai
from gateway.wire.apis import ANTHROPIC_MESSAGES
from gateway.wire.served_model import served_model

FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta")

# the Anthropic error type for each status the gateway answers with
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_ANTHROPIC_TYPES = frozenset(_TYPE_BY_STATUS.values()) | {"api_error"}

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

# output_config.effort -> reasoning_effort
OUTPUT_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}
# thinking budget (tokens) -> reasoning_effort: the first bound the budget is under
_EFFORT_BOUNDS = ((4096, "low"), (16384, "medium"))

# top-level fields the translation through chat understands; any other field of a
# request that cannot go to Anthropic as it came is refused (named in a 400)
TRANSLATED_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "metadata",
        "thinking",
        "stream",
        "output_config",
        # context editing: dropped (and said so) with the beta that enables it
        "context_management",
        # scheduling hints with no effect on the answer
        "service_tier",
    }
)
# fields a beta enables that a translation drops with the beta (never sent elsewhere)
BETA_FIELDS = ("context_management",)
_CLIENT_TOOL_TYPES = (None, "custom")
TRANSLATED_BLOCKS = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)
USER_BLOCKS = ("text", "image", "document", "tool_result", "thinking", "redacted_thinking")
ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")
_PATH = re.compile(r" - at `\$\.?(.*)`$")
_INDEX = re.compile(r"\[(\d+)\]")
_MISSING = re.compile(r"missing required field `([^`]+)`")

_T = TypeVar("_T")
_completion_decoder = msgspec.json.Decoder()


# -- auth ---------------------------------------------------------------------------


def api_key(headers: Mapping[str, str]) -> str | None:
    """The client's gateway key: `x-api-key` (the SDK's default) or a bearer token
    (`ANTHROPIC_AUTH_TOKEN`, Claude Code's gateway setting)."""
    key = headers.get("x-api-key")
    if key and key.strip():
        return key.strip()
    return bearer_token(headers.get("authorization"))


class NativeBody(dict[str, Any]):
    """The client's JSON object, plus what the same-API passthrough forwards beside it:
    the exact bytes it came as (so only the model name changes on the way up) and the
    Anthropic request headers (`anthropic-version`, `anthropic-beta`)."""

    __slots__ = ("headers", "raw")

    def __init__(self, value: dict[str, Any], raw: bytes, headers: Mapping[str, str]) -> None:
        super().__init__(value)
        self.raw = raw
        forwarded: dict[str, str] = {}
        for name in FORWARDED_HEADERS:  # (a loop: a comprehension is a call of its own)
            given = headers.get(name)
            if given is not None:
                forwarded[name] = given
        self.headers = forwarded

    def with_body(self, value: dict[str, Any]) -> NativeBody:
        """The same request with a changed body (e.g. a clamped max_tokens), its bytes
        re-encoded."""
        return NativeBody(value, msgspec.json.encode(value), self.headers)


# -- errors -------------------------------------------------------------------------


def error_type(error: GatewayError) -> str:
    """The Anthropic error type the SDK expects beside `error.status`."""
    if isinstance(error, UpstreamRejected) and error.code in _ANTHROPIC_TYPES:
        return str(error.code)  # Anthropic's own type, passed through
    if isinstance(error, (RateLimited, QuotaExceeded)):
        return "rate_limit_error"
    if isinstance(error, AuthenticationFailed):
        return "authentication_error"
    if isinstance(error, PermissionDenied):
        return "permission_error"
    if isinstance(error, NotFound):
        return "not_found_error"
    if isinstance(error, BodyTooLarge):
        return "request_too_large"
    if isinstance(error, Overloaded):
        return "overloaded_error"
    if isinstance(error, UpstreamTimeout):
        return "timeout_error"
    if error.status >= 500:
        return _TYPE_BY_STATUS.get(error.status, "api_error")
    return _TYPE_BY_STATUS.get(error.status, "invalid_request_error")


def error_message(error: GatewayError) -> str:
    if error.param and error.param not in error.message:
        return f"{error.param}: {error.message}"
    return error.message


def error_body(error: GatewayError) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}`, the status being error.status."""
    body = wire.ErrorResponseOut(wire.ErrorOut(error_type(error), error_message(error)))
    return wire.encoder.encode(body)


def error_event(error: GatewayError) -> bytes:
    """The `event: error` frame that ends a stream which has already begun."""
    return _frame("error", error_body(error))


# -- decode -------------------------------------------------------------------------


def decode_json(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """The body as a JSON object (the shared decoder, nested at most `max_depth`
    levels), or a 400 saying why not."""
    # the shared decoder's happy path, its brackets found (memchr) instead of counted:
    # a body it would refuse goes through it for its error
    try:
        value = msgspec.json.decode(body)
    except Exception:
        value = None
    if type(value) is dict and not (
        more_brackets_than(body, max_depth) and deeper_than(value, max_depth)
    ):
        return value
    return decode_json_object(body, max_depth=max_depth)


def parse_request(native: Mapping[str, Any]) -> wire.ClientRequest:
    """The typed Messages request, or a 400 naming the field (Anthropic's dotted path)."""
    return _convert(native, wire.ClientRequest)


def parse_count_tokens(native: Mapping[str, Any]) -> wire.CountTokensRequest:
    return _convert(native, wire.CountTokensRequest)


def _convert(native: Any, kind: type[_T], prefix: str = "") -> _T:
    try:
        return msgspec.convert(native, kind)
    except msgspec.ValidationError as exc:
        raise _invalid(str(exc), prefix) from None


def _invalid(message: str, prefix: str) -> InvalidRequest:
    """msgspec's error as Anthropic words it: `messages.0.content.1.type: Field required`."""
    match = _PATH.search(message)
    path = _INDEX.sub(r".\1", match.group(1)).lstrip(".") if match else ""
    detail = _PATH.sub("", message)
    missing = _MISSING.search(detail)
    if missing:
        path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        detail = "Field required"
    param = ".".join(p for p in (prefix, path) if p) or None
    return InvalidRequest(detail, param=param)


def to_internal(native: dict[str, Any]) -> tuple[openai.ChatRequest, dict[str, Any]]:
    """The internal request for a client's Messages body: the typed chat request and the
    OpenAI-chat-shaped dict that provider translations send on. Blocks with no chat form
    are left out of the chat body here (they are fine for Anthropic, which gets the
    client's body); `check_translatable` refuses them for every other upstream."""
    request = parse_request(native)
    chat_body = to_chat_body(request)
    try:
        chat = msgspec.convert(chat_body, openai.ChatRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"cannot be expressed as a chat request: {exc}") from None
    return chat, chat_body


def to_chat_body(request: wire.ClientRequest) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = system_text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(request.messages):
        if message.role == "user" and isinstance(message.content, str):
            messages.append({"role": "user", "content": message.content})  # as _user_messages
            continue
        blocks = read_blocks(message.content, f"messages.{i}.content")
        if message.role == "system":
            text = "\n\n".join(b.text for _, b in blocks if b.type == "text" and b.text)
            messages.append({"role": "system", "content": text})
        elif message.role == "user":
            messages.extend(_user_messages(blocks, message.content))
        else:
            messages.append(_assistant_message(blocks, f"messages.{i}.content"))
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
    }
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.top_k is not None:
        body["top_k"] = request.top_k
    if request.metadata is not None and request.metadata.user_id:
        body["user"] = request.metadata.user_id
    tools = (
        [_chat_tool(tool) for tool in request.tools if tool.type in _CLIENT_TOOL_TYPES]
        if request.tools
        else None
    )
    if tools:
        body["tools"] = tools
        _add_tool_choice(body, request.tool_choice)
    effort = reasoning_effort(request.thinking)
    output = request.output_config
    if output is not None and output.effort is not None:
        effort = OUTPUT_EFFORTS.get(output.effort, "medium")
    if effort is not None:
        body["reasoning_effort"] = effort
    if output is not None and output.format is not None:
        body["response_format"] = _response_format(output.format)
    return body


def _response_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidRequest(
            'output_config.format must be {"type": "json_schema", "schema": {...}}',
            param="output_config.format",
        )
    schema = {"name": "output", "schema": fmt["schema"], "strict": True}
    return {"type": "json_schema", "json_schema": schema}


def read_blocks(
    content: str | list[dict[str, Any]], param: str
) -> list[tuple[str, wire.ClientBlock]]:
    """(field path, block) for each block of a type chat can express, in order."""
    if isinstance(content, str):
        return [(param, wire.ClientBlock(type="text", text=content))]
    blocks: list[tuple[str, wire.ClientBlock]] = []
    for j, raw in enumerate(content):
        where = f"{param}.{j}"
        kind = _convert(raw, wire.AnyBlock, where).type
        if kind in TRANSLATED_BLOCKS:
            blocks.append((where, _convert(raw, wire.ClientBlock, where)))
    return blocks


def system_text(system: str | list[dict[str, Any]] | None) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    blocks = read_blocks(system, "system")
    return "\n\n".join(block.text for _, block in blocks if block.type == "text" and block.text)


def reasoning_effort(thinking: wire.ClientThinking | None) -> str | None:
    if thinking is None or thinking.type == "disabled":
        return None
    if thinking.type == "adaptive" or thinking.budget_tokens is None:
        return "medium"
    for bound, effort in _EFFORT_BOUNDS:
        if thinking.budget_tokens < bound:
            return effort
    return "high"


def _user_messages(
    blocks: list[tuple[str, wire.ClientBlock]], content: str | list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for where, block in blocks:
        if block.type == "tool_result":
            text, images = _tool_result(block, where)
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
            # OpenAI's tool messages take text only: a result's images follow as user parts
            parts.extend(images)
        else:
            part = _user_part(block, where)
            if part is not None:
                parts.append(part)
    if parts:
        if len(parts) == 1 and parts[0]["type"] == "text":
            results.append({"role": "user", "content": parts[0]["text"]})
        else:
            results.append({"role": "user", "content": parts})
    return results


def _user_part(block: wire.ClientBlock, where: str) -> dict[str, Any] | None:
    if block.type == "text":
        return {"type": "text", "text": block.text or ""}
    if block.type == "image":
        return {"type": "image_url", "image_url": {"url": _image_url(block.source, where)}}
    if block.type == "document":
        return _document_part(block, where)
    return None  # thinking in a user turn: nothing to say to another model


def _image_url(source: Mapping[str, Any] | None, where: str) -> str:
    source = source or {}
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise InvalidRequest(
        "image sources must be base64 or url for this model's API", param=f"{where}.source"
    )


def _document_part(block: wire.ClientBlock, where: str) -> dict[str, Any]:
    source = block.source or {}
    kind = source.get("type")
    if kind == "base64" and source.get("media_type") == "application/pdf":
        data_url = f"data:application/pdf;base64,{source.get('data', '')}"
        name = (block.title or "document") + ".pdf"
        return {"type": "file", "file": {"filename": name, "file_data": data_url}}
    if kind == "text" and isinstance(source.get("data"), str):
        title = f"{block.title}\n\n" if block.title else ""
        return {"type": "text", "text": title + source["data"]}
    raise InvalidRequest(
        "documents must be base64 PDFs or text for this model's API", param=f"{where}.source"
    )


def _tool_result(block: wire.ClientBlock, where: str) -> tuple[str, list[dict[str, Any]]]:
    """A tool_result's text, and its images as user parts."""
    if not block.tool_use_id:
        raise InvalidRequest("Field required", param=f"{where}.tool_use_id")
    content = block.content
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif content is not None:
        for k, inner in enumerate(content):
            if inner.type == "text":
                texts.append(inner.text or "")
            elif inner.type == "image":
                url = _image_url(inner.source, f"{where}.content.{k}")
                images.append({"type": "image_url", "image_url": {"url": url}})
    text = "\n\n".join(texts)
    if block.is_error:
        text = "Error: " + text
    return text, images


def _assistant_message(blocks: list[tuple[str, wire.ClientBlock]], param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for where, block in blocks:
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type == "tool_use":
            if not block.id or not block.name:
                raise InvalidRequest("tool_use blocks need an id and a name", param=where)
            arguments = msgspec.json.encode(block.input if block.input is not None else {})
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments.decode()},
                }
            )
        # thinking of earlier turns is not sent on (see the module docstring); images
        # and documents in assistant turns have no chat form: check_translatable says so
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _chat_tool(tool: wire.ClientTool) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.name,
        "parameters": tool.input_schema or {"type": "object", "properties": {}},
    }
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _add_tool_choice(body: dict[str, Any], choice: wire.ClientToolChoice | None) -> None:
    if choice is None:
        return
    if choice.type == "auto":
        body["tool_choice"] = "auto"
    elif choice.type == "any":
        body["tool_choice"] = "required"
    elif choice.type == "none":
        body["tool_choice"] = "none"
    else:
        if not choice.name:
            raise InvalidRequest("Field required", param="tool_choice.name")
        body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    if choice.disable_parallel_tool_use:
        body["parallel_tool_calls"] = False


def check_translatable(native: Mapping[str, Any]) -> None:
    """Refuse (400 naming the field) what the translation through chat would lose: a
    request that is fine for Anthropic may not be for another upstream. Call it on a
    body `decode` accepted."""
    for name in native:
        if name not in TRANSLATED_FIELDS:
            raise InvalidRequest(
                f"'{name}' is an Anthropic feature this model's API has no equivalent for; "
                "use an Anthropic model or leave it out",
                param=name,
            )
    # (tools and output_config are walked only when sent: most requests send neither)
    tools = native.get("tools")
    if tools:
        for i, tool in enumerate(tools):
            kind = tool.get("type")
            if kind not in _CLIENT_TOOL_TYPES:
                raise InvalidRequest(
                    f"server tool '{kind}' runs only on Anthropic models; use an Anthropic "
                    "model or define it as a client tool",
                    param=f"tools.{i}.type",
                )
    output = native.get("output_config")
    if output:
        for key in output:
            if key not in ("effort", "format"):
                raise InvalidRequest(
                    f"output_config.{key} has no equivalent for this model's API",
                    param=f"output_config.{key}",
                )
    system = native.get("system")
    if isinstance(system, list):
        _check_blocks(system, "system", ("text",))
    for i, message in enumerate(native["messages"]):
        content = message["content"]
        if isinstance(content, list):
            allowed = {"user": USER_BLOCKS, "assistant": ASSISTANT_BLOCKS}.get(
                message["role"], ("text",)
            )
            _check_blocks(content, f"messages.{i}.content", allowed)
            for j, block in enumerate(content):
                inner = block.get("content")
                if block["type"] == "tool_result" and isinstance(inner, list):
                    where = f"messages.{i}.content.{j}.content"
                    _check_blocks(inner, where, ("text", "image"))


def _check_blocks(blocks: list[dict[str, Any]], param: str, allowed: tuple[str, ...]) -> None:
    for j, block in enumerate(blocks):
        if block.get("type") not in allowed:
            raise InvalidRequest(
                f"content blocks of type '{block.get('type')}' have no equivalent for this "
                "model's API; use an Anthropic model or leave them out",
                param=f"{param}.{j}.type",
            )


def translation_changes(native: Mapping[str, Any], headers: Mapping[str, str]) -> tuple[str, ...]:
    """What a translation to another API leaves out, as x-gateway-route names it: the
    client's betas (no other API has the header) and the fields only a beta enables."""
    header = headers.get("anthropic-beta")
    if not header and native.keys().isdisjoint(BETA_FIELDS):
        return ()  # most requests: no beta asked for, no beta's field sent
    betas = [b.strip() for b in (header or "").split(",") if b.strip()]
    changes = [f"dropped-beta:{beta}" for beta in betas]
    changes.extend(f"dropped:{name}" for name in BETA_FIELDS if name in native)
    return tuple(changes)


# -- count_tokens -------------------------------------------------------------------


def count_tokens(native: dict[str, Any], tokenizer: str = "cl100k") -> int:
    """`input_tokens` for `/v1/messages/count_tokens`: the gateway's offline count of the
    prompt as the translation through chat sees it (an estimate for Claude models,
    whose tokenizer is not published)."""
    return count_prompt(count_tokens_request(native), tokenizer)


def count_tokens_request(native: dict[str, Any]) -> openai.ChatRequest:
    """A count_tokens body as the internal request it would be (what planning reads)."""
    request = parse_count_tokens(native)
    full = wire.ClientRequest(
        model=request.model,
        max_tokens=1,
        messages=request.messages,
        system=request.system,
        tools=request.tools,
        tool_choice=request.tool_choice,
    )
    chat: openai.ChatRequest = msgspec.convert(to_chat_body(full), openai.ChatRequest)
    return chat


def count_tokens_body(input_tokens: int) -> bytes:
    return wire.encoder.encode({"input_tokens": input_tokens})


# -- encode -------------------------------------------------------------------------


def usage_out(usage: Usage) -> wire.UsageOut:
    return wire.UsageOut(
        input_tokens=usage.uncached_input_tokens,
        output_tokens=usage.output_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens,
        cache_read_input_tokens=usage.cached_input_tokens,
    )


_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


def message_id(request_id: str) -> str:
    """`msg_` and the request id, each character outside [A-Za-z0-9_-] made `_`."""
    # the gateway's own ids (`req_<hex>`) are ASCII identifiers: nothing to replace
    if request_id.isidentifier() and request_id.isascii():
        return "msg_" + request_id
    return "msg_" + _UNSAFE_ID.sub("_", request_id)


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the `input` object Anthropic's clients expect: an
    upstream that streamed something that is not a JSON object keeps it under `arguments`."""
    if not arguments.strip():
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def stop_reason(finish_reason: str | None, *, has_tool_calls: bool) -> str:
    if has_tool_calls and finish_reason in (None, "stop", "tool_calls", "function_call"):
        return "tool_use"
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")


def encode_message(
    completion: bytes, request_id: str, deployment_model: str, usage: Usage | None = None
) -> bytes:
    """A `chat.completion` body as Anthropic's Message (first choice: Anthropic has no n),
    with `usage` or else the usage the completion reports, named by the served model."""
    try:
        answer = _answer_decoder.decode(completion)
    except (msgspec.ValidationError, msgspec.DecodeError):
        answer = None
    if answer is None or not answer.choices:
        return _encode_parsed(
            _completion_decoder.decode(completion), request_id, deployment_model, usage
        )
    # the common answer, read into structs: the same fields the dict path reads
    choice = answer.choices[0]
    message = choice.message or _NO_MESSAGE
    if usage is None:
        usage = _typed_usage(answer.usage)
    content: list[wire.ContentBlock] = []
    reasoning = message.reasoning_content
    if isinstance(reasoning, str) and reasoning:
        content.append(wire.ThinkingBlock(thinking=reasoning, signature=""))
    text = message.content
    if isinstance(text, str) and text:
        content.append(wire.TextBlock(text))
    calls = message.tool_calls or []
    if calls:
        content.extend(_tool_uses(calls))
    body = wire.MessageOut(
        id=message_id(request_id),
        model=served_model(answer.model, deployment_model),
        content=content,
        stop_reason=stop_reason(choice.finish_reason, has_tool_calls=bool(calls)),
        usage=usage_out(usage),
    )
    return wire.encoder.encode(body)


class _AnswerMessage(msgspec.Struct):
    content: Any = None
    reasoning_content: Any = None
    tool_calls: list[dict[str, Any]] | None = None


_NO_MESSAGE = _AnswerMessage()


class _AnswerChoice(msgspec.Struct):
    message: _AnswerMessage | None = None
    finish_reason: Any = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class _AnswerUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_cache_hit_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None


class _Answer(msgspec.Struct):
    model: Any = None
    choices: list[_AnswerChoice] | None = None
    usage: _AnswerUsage | None = None


_answer_decoder = msgspec.json.Decoder(_Answer)


def _typed_usage(usage: _AnswerUsage | None) -> Usage:
    """`_usage_of` of a typed answer's usage."""
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details or _NO_DETAILS
    prompt = usage.prompt_tokens or 0
    cached = details.cached_tokens or usage.prompt_cache_hit_tokens or 0
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=min(cached, prompt),
        cache_write_tokens=details.cache_write_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
    )


_NO_DETAILS = _PromptDetails()


def _tool_uses(calls: list[dict[str, Any]]) -> list[wire.ContentBlock]:
    blocks: list[wire.ContentBlock] = []
    for n, call in enumerate(calls):
        function = call.get("function") or {}
        blocks.append(
            wire.ToolUseBlock(
                id=str(call.get("id") or f"toolu_{n}"),
                name=str(function.get("name") or ""),
                input=tool_input(str(function.get("arguments") or "")),
            )
        )
    return blocks


def _encode_parsed(
    parsed: Any, request_id: str, deployment_model: str, usage: Usage | None
) -> bytes:
    """`encode_message` of a chat.completion decoded as plain JSON."""
    if usage is None:
        usage = _usage_of(parsed)
    choices = parsed.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[wire.ContentBlock] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        content.append(wire.ThinkingBlock(thinking=reasoning, signature=""))
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append(wire.TextBlock(text))
    calls = message.get("tool_calls") or []
    content += _tool_uses(calls)
    body = wire.MessageOut(
        id=message_id(request_id),
        model=served_model(parsed.get("model"), deployment_model),
        content=content,
        stop_reason=stop_reason(choice.get("finish_reason"), has_tool_calls=bool(calls)),
        usage=usage_out(usage),
    )
    return wire.encoder.encode(body)


# -- stream -------------------------------------------------------------------------


def _frame(event: str, data: bytes) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class _StreamFunction(msgspec.Struct):
    name: Any = None
    arguments: Any = None


class _StreamToolCall(msgspec.Struct):
    index: int
    id: Any = None
    function: _StreamFunction | None = None


class _StreamDelta(msgspec.Struct):
    content: Any = None
    reasoning_content: Any = None
    tool_calls: list[_StreamToolCall] | None = None


class _StreamChoice(msgspec.Struct):
    """A chunk's choice as the stream reads it, as leniently as the dict paths of the
    other APIs: any finish reason (DeepSeek's `insufficient_system_resource`, vLLM's
    `abort`: `stop_reason` maps what Anthropic has no name for), a role, id, type or name
    of null or anything else (not read), logprobs whatever they hold; the fields read are
    checked where they are read. A chunk that still fails to decode is skipped whole."""

    index: int
    delta: _StreamDelta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_StreamChoice] = msgspec.field(default_factory=list)
    usage: dict[str, Any] | None = None
    model: str | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
# `_block_delta` of a text delta, framed: the open block's index, the text (JSON)
_TEXT_DELTA_FRAME = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"text_delta","text":%b}}\n\n'
)
# and of a tool call's arguments: its block's index, the arguments (JSON)
_ARGUMENTS_DELTA_FRAME = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"input_json_delta","partial_json":%b}}\n\n'
)


_EVENT_TYPE = re.compile(rb'^\s*\{\s*"type"\s*:\s*"([a-z_]+)"')


def event_name(payload: bytes) -> bytes:
    """An Anthropic event payload's `type`, which is also its SSE event name."""
    match = _EVENT_TYPE.match(payload)
    if match is not None:
        return match.group(1)
    try:
        kind = msgspec.json.decode(payload).get("type")
    except (msgspec.DecodeError, AttributeError):
        return b"message"
    return str(kind or "message").encode()


class NativeStreamEncoder:
    """Same-API streams: Anthropic's own event payloads, framed as Anthropic frames them
    (message_start names the served model as Anthropic named it)."""

    def feed(self, payloads: list[bytes]) -> bytes:
        return b"".join([_frame_bytes(event_name(p), p) for p in payloads])

    def finish(
        self, held: list[bytes], usage: Usage | None, cost: Decimal | None = None
    ) -> list[bytes]:
        return [_frame_bytes(event_name(p), p) for p in held]

    def error(self, error: GatewayError) -> list[bytes]:
        return [error_event(error)]


def _frame_bytes(event: bytes, data: bytes) -> bytes:
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


class StreamEncoder:
    """OpenAI `chat.completion.chunk` payloads in, Anthropic's event stream out, one
    block at a time as Anthropic sends it: message_start (and a ping), then per block
    content_block_start / *_delta / content_block_stop, then message_delta with the stop
    reason and usage, and message_stop.

    Blocks open in the order their content arrives; a chunk of another kind (text after
    thinking, a new tool call) closes the open block. Arguments for a tool call whose
    block is already closed (an upstream interleaving parallel calls) go to that block's
    index, which the SDKs accumulate by index.
    """

    def __init__(self, request_id: str, deployment_model: str, input_tokens: int = 0) -> None:
        self._id = message_id(request_id)
        # message_start names the model the first chunk names (gateway.wire.served_model)
        self._model = deployment_model
        self._input_tokens = input_tokens
        self._started = False
        self._ended = False
        self._open: int | None = None
        self._open_kind = ""
        self._blocks = 0
        # OpenAI tool call index -> our block index
        self._tools: dict[int, int] = {}
        self._finish: str | None = None

    def feed(self, payloads: list[bytes]) -> bytes:
        """The frames for one network read's chat chunks (b"" when there are none)."""
        out: list[bytes] = []
        for payload in payloads:
            out.extend(self.feed_chunk(payload))
        return b"".join(out)

    def feed_chunk(self, chunk: bytes) -> list[bytes]:
        try:
            parsed = _chunk_decoder.decode(chunk)
        except msgspec.DecodeError:
            return []
        if (self._open is not None and self._open_kind == "text") or self._tools:
            frame = self._more_of_one(parsed)
            if frame is not None:
                return [frame]
        if not self._started:
            self._model = served_model(parsed.model, self._model)
        out = self._start()
        for choice in parsed.choices:
            if choice.index != 0:
                continue
            if choice.delta is not None:
                out.extend(self._delta(choice.delta))
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
        return out

    def _more_of_one(self, parsed: _Chunk) -> bytes | None:
        """The next delta event of the open text block or of a tool call's block, if the
        chunk only adds to its text or arguments (most of a stream): written from a
        template, without the event's dicts and their encoding. None for anything else,
        which `feed_chunk` reads as ever."""
        choices = parsed.choices
        if len(choices) != 1:
            return None
        choice = choices[0]
        delta = choice.delta
        if (
            choice.index != 0
            or choice.finish_reason is not None
            or delta is None
            or delta.reasoning_content
        ):
            return None
        content, calls = delta.content, delta.tool_calls
        if not isinstance(calls, list):
            block = self._open
            if block is None or self._open_kind != "text" or not isinstance(content, str):
                return None
            return _TEXT_DELTA_FRAME % (block, wire.encoder.encode(content)) if content else None
        if content or len(calls) != 1:
            return None
        call = calls[0]
        block = self._tools.get(call.index)
        function = call.function
        if block is None or function is None:
            return None
        arguments = function.arguments
        if not isinstance(arguments, str) or not arguments:
            return None
        return _ARGUMENTS_DELTA_FRAME % (block, wire.encoder.encode(arguments))

    def finish(
        self, held: list[bytes], usage: Usage | None, cost: Decimal | None = None
    ) -> list[bytes]:
        """The closing frames: whatever chunks the translation held back, the open block's
        stop, message_delta with the stop reason and the usage, message_stop."""
        if self._ended:
            return []
        out: list[bytes] = []
        for payload in held:
            out.extend(self.feed_chunk(payload))
        self._ended = True
        out.extend(self._start())
        out.extend(self._close())
        usage = usage or Usage()
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": stop_reason(self._finish, has_tool_calls=bool(self._tools)),
                "stop_sequence": None,
            },
            "usage": msgspec.structs.asdict(usage_out(usage)),
        }
        out.append(_frame("message_delta", wire.encoder.encode(delta)))
        out.append(_frame("message_stop", b'{"type":"message_stop"}'))
        return out

    def error(self, error: GatewayError) -> list[bytes]:
        self._ended = True
        return [error_event(error)]

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        start = {
            "type": "message_start",
            "message": {
                "id": self._id,
                "type": "message",
                "role": "assistant",
                "model": self._model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": self._input_tokens, "output_tokens": 0},
            },
        }
        return [
            _frame("message_start", wire.encoder.encode(start)),
            _frame("ping", b'{"type":"ping"}'),
        ]

    def _delta(self, delta: _StreamDelta) -> list[bytes]:
        out: list[bytes] = []
        if isinstance(delta.reasoning_content, str) and delta.reasoning_content:
            out.extend(
                self._open_block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            )
            out.append(
                self._block_delta({"type": "thinking_delta", "thinking": delta.reasoning_content})
            )
        if isinstance(delta.content, str) and delta.content:
            out.extend(self._open_block("text", {"type": "text", "text": ""}))
            out.append(self._block_delta({"type": "text_delta", "text": delta.content}))
        if isinstance(delta.tool_calls, list):
            for call in delta.tool_calls:
                out.extend(self._tool_delta(call))
        return out

    def _tool_delta(self, call: _StreamToolCall) -> list[bytes]:
        out: list[bytes] = []
        function = call.function
        block = self._tools.get(call.index)
        if block is None:
            out.extend(self._close())
            block = self._blocks
            self._blocks += 1
            self._tools[call.index] = block
            self._open, self._open_kind = block, "tool"
            name = function.name if function is not None and isinstance(function.name, str) else ""
            start = {
                "type": "content_block_start",
                "index": block,
                "content_block": {
                    "type": "tool_use",
                    "id": call.id if isinstance(call.id, str) else f"toolu_{block}",
                    "name": name,
                    "input": {},
                },
            }
            out.append(_frame("content_block_start", wire.encoder.encode(start)))
        arguments = function.arguments if function is not None else None
        if isinstance(arguments, str) and arguments:
            delta = {
                "type": "content_block_delta",
                "index": block,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            }
            out.append(_frame("content_block_delta", wire.encoder.encode(delta)))
        return out

    def _open_block(self, kind: str, content_block: dict[str, Any]) -> list[bytes]:
        if self._open is not None and self._open_kind == kind:
            return []
        out = self._close()
        self._open, self._open_kind = self._blocks, kind
        self._blocks += 1
        start = {"type": "content_block_start", "index": self._open, "content_block": content_block}
        out.append(_frame("content_block_start", wire.encoder.encode(start)))
        return out

    def _block_delta(self, delta: dict[str, Any]) -> bytes:
        event = {"type": "content_block_delta", "index": self._open, "delta": delta}
        return _frame("content_block_delta", wire.encoder.encode(event))

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        index, self._open = self._open, None
        return [_frame("content_block_stop", b'{"type":"content_block_stop","index":%d}' % index)]


# -- the codec ----------------------------------------------------------------------


def _usage_of(completion: Mapping[str, Any]) -> Usage:
    """The usage a chat.completion reports, in the gateway's convention."""
    usage = completion.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int(details.get("cached_tokens") or usage.get("prompt_cache_hit_tokens") or 0)
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=min(cached, prompt),
        cache_write_tokens=int(details.get("cache_write_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
    )


class AnthropicMessagesCodec:
    """`POST /v1/messages`; see the module docstring for what translates how."""

    api = ANTHROPIC_MESSAGES

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.max_depth = max_depth

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        return api_key(headers)

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded:
        native = decode_json(body, max_depth=self.max_depth)
        request, chat_body = to_internal(native)
        try:
            check_translatable(native)
            untranslatable = None
        except InvalidRequest as refusal:
            untranslatable = refusal.param
        return Decoded(
            request,
            chat_body,
            NativeBody(native, body, headers),
            untranslatable,
            translation_changes=translation_changes(native, headers),
        )

    def encode_response(self, completion: bytes, native: bool, ctx: EncodeContext) -> bytes:
        if native:
            return completion  # Anthropic's own message, as it came
        return encode_message(completion, ctx.request_id, ctx.model)

    def stream_encoder(
        self, native: bool, ctx: EncodeContext
    ) -> NativeStreamEncoder | StreamEncoder:
        if native:
            return NativeStreamEncoder()
        return StreamEncoder(ctx.request_id, ctx.model)

    def error_body(self, error: GatewayError) -> bytes:
        return error_body(error)
