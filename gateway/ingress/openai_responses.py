"""The OpenAI Responses API (`POST /v1/responses`) as an ingress codec: pure functions.

Decode: the client's JSON -> a typed :class:`ResponsesRequest`, its conversation as
Responses input items (a stored conversation's items first, when it continues one), and
the internal request (OpenAI chat completions) those items become. Encode: a
`chat.completion` -> a Response object, and a stream of `chat.completion.chunk`s -> the
Responses event stream (`response.created` ... `response.completed`), every event with
its `sequence_number`.

Choices that are not one-to-one, so users can predict them:

- `instructions` becomes the first system message; `developer` messages become system
  messages (self-hosted chat templates often know no developer role).
- `function_call` items become an assistant message's `tool_calls` (consecutive calls,
  and the assistant text just before them, share one message); `function_call_output`
  items become `tool` messages.
- `reasoning` items are dropped on the way to a chat upstream: their content is the
  provider's own and (encrypted or summarised) no other model can read it. Reasoning
  tokens are still counted in usage.
- Built-in tools (web search, file search, computer use, ...) cannot be expressed in
  chat completions; they are kept aside (`builtin_tools`) for the provider translation,
  which maps web search to its provider's own (Anthropic's web search, Gemini's Google
  Search grounding) and drops the rest, or refuses them when the provider says
  `builtin_tools: refuse` (gateway/providers/builtin_tools.py). OpenAI's own Responses
  API gets them as they came.
- `namespace` tools (Codex's `multi_agent_v1`) become flat functions named
  `<namespace>__<name>`; calls to them come back as `function_call` items with their
  `namespace` and name, streamed or not (gateway/ingress/namespace_tools.py).
- Fields chat completions cannot carry (Codex's `client_metadata`, `include`,
  `prompt_cache_key`, ...) are left out of the upstream call: x-gateway-route names them
  (`changed=dropped:client_metadata`), as it names flattened namespaces.
- `metadata` and `store` belong to the gateway's record of the response, not to the
  upstream call; `max_output_tokens` -> `max_completion_tokens`; `text.format` ->
  `response_format`; `reasoning.effort` -> `reasoning_effort`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec

from gateway.errors import GatewayError, InvalidRequest
from gateway.ingress.base import Decoded, EncodeContext
from gateway.ingress.namespace_tools import NamespaceNames, flat_name
from gateway.ingress.openai_chat import convert, openai_api_key
from gateway.json_body import decode_json_object, more_brackets_than
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_RESPONSES
from gateway.wire.openai import ChatRequest
from gateway.wire.responses import BUILTIN_TOOLS, ResponsesRequest

_MAX_DEPTH = 64


# -- decode ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuiltinTool:
    name: str
    param: str


@dataclass(slots=True)
class ResponsesCall:
    """One decoded Responses request: the typed request, the client's JSON, and the
    input items it adds to the conversation (a string input as one user message)."""

    request: ResponsesRequest
    native: dict[str, Any]
    input_items: list[dict[str, Any]]
    builtin_tools: list[BuiltinTool] = field(default_factory=list)


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object nested no deeper than a conversation needs, or a 400."""
    # one decode (the shared decoder's checks are its own, looser limit's: a body they
    # could refuse, or one nested too deep, goes through them for its error)
    try:
        value = msgspec.json.decode(body)
    except Exception:
        value = None
    if type(value) is not dict:
        return _checked_json_object(body)
    # nesting deeper than the limit needs more brackets than it: most bodies skip the walk
    if more_brackets_than(body, _MAX_DEPTH) and _too_deep(value, 0):
        return _checked_json_object(body)
    return value


def _checked_json_object(body: bytes) -> dict[str, Any]:
    value = decode_json_object(body)
    if more_brackets_than(body, _MAX_DEPTH) and _too_deep(value, 0):
        raise InvalidRequest(
            f"The request body nests deeper than {_MAX_DEPTH} levels.", code="invalid_json"
        )
    return value


def _too_deep(value: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return True
    if isinstance(value, dict):
        return any(_too_deep(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_too_deep(v, depth + 1) for v in value)
    return False


class ResponsesBody(dict[str, Any]):
    """The client's JSON object, carrying the typed request decoded from it, so the
    answer's encoder echoes its settings without converting it again. Nothing changes
    a body in place: a stage that changes one (a resumed conversation) makes a plain
    dict, which the encoder converts itself."""

    __slots__ = ("request",)

    request: ResponsesRequest


def decode(body: bytes) -> ResponsesCall:
    native = ResponsesBody(json_object(body))
    request: ResponsesRequest = convert(native, ResponsesRequest)
    native.request = request
    items = input_items(request.input)
    builtin = builtin_tools(request)
    return ResponsesCall(request, native, items, builtin)


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [dict(item) for item in value]


def builtin_tools(request: ResponsesRequest) -> list[BuiltinTool]:
    choice = request.tool_choice
    if not request.tools and not isinstance(choice, dict):
        return []  # most requests: no tools, nothing to look through
    found: list[BuiltinTool] = []
    for i, tool in enumerate(request.tools or []):
        kind = tool.get("type")
        if kind == "namespace":
            for j, inner in enumerate(tool.get("tools") or ()):
                inner_kind = inner.get("type") if isinstance(inner, dict) else None
                if inner_kind != "function":
                    found.append(BuiltinTool(str(inner_kind), f"tools[{i}].tools[{j}].type"))
        elif kind != "function":
            found.append(BuiltinTool(str(kind), f"tools[{i}].type"))
    if isinstance(choice, dict) and choice.get("type") in BUILTIN_TOOLS:
        found.append(BuiltinTool(str(choice["type"]), "tool_choice.type"))
    return found


# -- Responses items -> chat completions ---------------------------------------------


def to_chat(
    request: ResponsesRequest, items: list[dict[str, Any]], *, history: int = 0
) -> tuple[ChatRequest, dict[str, Any]]:
    """The internal request for a conversation: `items` are the Responses input items
    (a stored conversation's `history` items first, then the client's own); a bad item
    is named by its index in the client's `input`."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    for position, item in enumerate(items):
        param = f"input[{position - history}]" if position >= history else "previous_response_id"
        _append_item(messages, item, param)
    if not messages:
        raise InvalidRequest("The request has no input: send `input`.", param="input")
    chat: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.stream:
        chat["stream"] = True
    tools = (
        [
            chat_tool
            for i, tool in enumerate(request.tools)
            for chat_tool in _chat_tools(tool, f"tools[{i}]")
        ]
        if request.tools
        else None
    )
    if tools:
        chat["tools"] = tools
    choice = _chat_tool_choice(request.tool_choice)
    if choice is not None and (tools or isinstance(choice, str)):
        chat["tool_choice"] = choice
    if request.parallel_tool_calls is not None and tools:
        chat["parallel_tool_calls"] = request.parallel_tool_calls
    if request.max_output_tokens is not None:
        chat["max_completion_tokens"] = request.max_output_tokens
    if request.temperature is not None:
        chat["temperature"] = request.temperature
    if request.top_p is not None:
        chat["top_p"] = request.top_p
    if request.user is not None:
        chat["user"] = request.user
    if request.top_logprobs is not None:
        chat["logprobs"] = True
        chat["top_logprobs"] = request.top_logprobs
    if request.text is not None:
        response_format = _response_format(request)
        if response_format is not None:
            chat["response_format"] = response_format
    if request.reasoning is not None and isinstance(request.reasoning.effort, str):
        chat["reasoning_effort"] = request.reasoning.effort
    typed: ChatRequest = convert(chat, ChatRequest)
    return typed, chat


def _append_item(messages: list[dict[str, Any]], item: dict[str, Any], param: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        _append_message(messages, item, param)
    elif kind == "function_call":
        name = _string(item, "name", param)
        namespace = item.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = flat_name(namespace, name)
        call = {
            "id": _string(item, "call_id", param),
            "type": "function",
            "function": {
                "name": name,
                "arguments": _string(item, "arguments", param, default=""),
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_call_id" not in last:
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append(
            {
                "role": "tool",
                "tool_call_id": _string(item, "call_id", param),
                "content": _output_text(item.get("output"), f"{param}.output"),
            }
        )
    elif kind == "reasoning":
        return
    elif kind == "item_reference":
        raise InvalidRequest(
            "Item references point into OpenAI's own store, which the gateway does not "
            "read; send the item itself, or continue with previous_response_id.",
            param=f"{param}.type",
        )
    else:
        raise InvalidRequest(
            f"Input items of type '{kind}' come from OpenAI's built-in tools and cannot be "
            "sent to this model; remove them or ask for an OpenAI model.",
            param=f"{param}.type",
        )


def _append_message(messages: list[dict[str, Any]], item: dict[str, Any], param: str) -> None:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise InvalidRequest(
            "A message's role must be one of user, system, developer, assistant.",
            param=f"{param}.role",
        )
    content = item.get("content")
    if role == "assistant":
        text = _assistant_text(content, f"{param}.content")
        messages.append({"role": "assistant", "content": text})
        return
    chat_role = "system" if role == "developer" else role
    if isinstance(content, str):
        messages.append({"role": chat_role, "content": content})
        return
    if not isinstance(content, list):
        raise InvalidRequest(
            "A message's content must be a string or a list of parts.", param=f"{param}.content"
        )
    parts = [_chat_part(part, f"{param}.content[{i}]") for i, part in enumerate(content)]
    if chat_role == "system":
        texts = [part["text"] for part in parts if part["type"] == "text"]
        if len(texts) != len(parts):
            raise InvalidRequest(
                "System and developer messages take text only.", param=f"{param}.content"
            )
        messages.append({"role": "system", "content": "".join(texts)})
        return
    messages.append({"role": chat_role, "content": parts})


def _chat_part(part: Any, param: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise InvalidRequest("A content part must be an object.", param=param)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": _string(part, "text", param)}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise InvalidRequest(
                "Images must be sent as `image_url` (an https or data URL): file ids live "
                "in OpenAI's file store, which the gateway does not read.",
                param=f"{param}.image_url",
            )
        image: dict[str, Any] = {"url": url}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        data = part.get("file_data")
        if not isinstance(data, str) or not data:
            raise InvalidRequest(
                "Files must be sent inline as `file_data`: file ids and URLs point into "
                "OpenAI's file store, which the gateway does not read.",
                param=f"{param}.file_data",
            )
        file: dict[str, Any] = {"file_data": data}
        if isinstance(part.get("filename"), str):
            file["filename"] = part["filename"]
        return {"type": "file", "file": file}
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict):
            raise InvalidRequest("input_audio needs data and format.", param=param)
        return {"type": "input_audio", "input_audio": audio}
    raise InvalidRequest(f"Unknown content part type '{kind}'.", param=f"{param}.type")


def _assistant_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(
            "A message's content must be a string or a list of parts.", param=param
        )
    texts: list[str] = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest("A content part must be an object.", param=f"{param}[{i}]")
        if part.get("type") == "refusal":
            texts.append(_string(part, "refusal", f"{param}[{i}]"))
        else:
            texts.append(_string(part, "text", f"{param}[{i}]"))
    return "".join(texts)


def _output_text(output: Any, param: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = [p.get("text") for p in output if isinstance(p, dict)]
        if all(isinstance(t, str) for t in texts) and len(texts) == len(output):
            return "".join(t for t in texts if isinstance(t, str))
    raise InvalidRequest(
        "A function_call_output's output must be a string or a list of text parts.",
        param=param,
    )


def _string(item: dict[str, Any], name: str, param: str, default: str | None = None) -> str:
    value = item.get(name, default)
    if not isinstance(value, str):
        raise InvalidRequest(f"`{name}` must be a string.", param=f"{param}.{name}")
    return value


def _chat_tools(tool: dict[str, Any], param: str) -> list[dict[str, Any]]:
    """The chat functions for one Responses tool: itself, a namespace's functions
    flattened, or none for a built-in tool (see builtin_tools)."""
    kind = tool.get("type")
    if kind == "function":
        return [_chat_function(tool, _string(tool, "name", param))]
    if kind != "namespace":
        return []
    namespace = _string(tool, "name", param)
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise InvalidRequest("A namespace tool needs a `tools` list.", param=f"{param}.tools")
    return [
        _chat_function(function, flat_name(namespace, _string(function, "name", where)))
        for j, function in enumerate(inner)
        for where in (f"{param}.tools[{j}]",)
        if isinstance(function, dict) and function.get("type") == "function"
    ]


def _chat_function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


# the top-level fields the translation to chat carries (or the gateway keeps itself:
# metadata, store, previous_response_id); any other is left out and named
CARRIED_FIELDS = frozenset(ResponsesRequest.__struct_fields__)


def translation_changes(native: Mapping[str, Any]) -> tuple[str, ...]:
    """What the translation to chat changes, as x-gateway-route names it: namespaces
    flattened into functions, fields left out."""
    if not native.get("tools") and native.keys() <= CARRIED_FIELDS:
        return ()
    changes = [
        f"flattened:{tool.get('name')}"
        for tool in native.get("tools") or ()
        if isinstance(tool, dict) and tool.get("type") == "namespace"
    ]
    changes.extend(f"dropped:{name}" for name in native if name not in CARRIED_FIELDS)
    return tuple(changes)


def _chat_tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
    if kind in BUILTIN_TOOLS:
        return None  # refused with the built-in tools
    raise InvalidRequest(
        f"tool_choice of type '{kind}' cannot be translated for this model; use auto, "
        "none, required or a function.",
        param="tool_choice.type",
    )


def _response_format(request: ResponsesRequest) -> dict[str, Any] | None:
    if request.text is None or isinstance(request.text.format, msgspec.UnsetType):
        return None
    fmt = request.text.format
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt.name, msgspec.UnsetType):
        raise InvalidRequest("A json_schema format needs a name.", param="text.format.name")
    schema: dict[str, Any] = {"name": fmt.name}
    for key in ("schema", "description", "strict"):
        value = getattr(fmt, key)
        if not isinstance(value, msgspec.UnsetType) and value is not None:
            schema[key] = value
    return {"type": "json_schema", "json_schema": schema}


# -- encode ---------------------------------------------------------------------------


_NO_NAMESPACES = NamespaceNames({})


@dataclass(frozen=True, slots=True)
class ResponseContext:
    """What a Response object says beside its output: its id and time, the model name to
    answer with, and the request whose settings it echoes."""

    response_id: str
    created_at: int
    model: str
    request: ResponsesRequest

    @property
    def namespace_names(self) -> NamespaceNames:
        tools = self.request.tools
        return NamespaceNames.of(tools) if tools else _NO_NAMESPACES

    def item_id(self, prefix: str, number: int) -> str:
        return f"{prefix}_{self.response_id.removeprefix('resp_')}{number:02d}"


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def response_body(
    ctx: ResponseContext,
    output: list[dict[str, Any]],
    *,
    status: str,
    usage: Usage | None,
    incomplete_reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    request = ctx.request
    text: dict[str, Any] = {"format": {"type": "text"}}
    if request.text is not None:
        text = msgspec.to_builtins(request.text)
        text.setdefault("format", {"type": "text"})
    reasoning: dict[str, Any] | None = None
    if request.reasoning is not None:
        reasoning = msgspec.to_builtins(request.reasoning)
    return {
        "id": ctx.response_id,
        "object": "response",
        "created_at": ctx.created_at,
        "status": status,
        "error": error,
        "incomplete_details": (
            {"reason": incomplete_reason} if incomplete_reason is not None else None
        ),
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": dict(request.metadata or {}),
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": (
            request.parallel_tool_calls if request.parallel_tool_calls is not None else True
        ),
        "previous_response_id": request.previous_response_id,
        "reasoning": reasoning,
        "store": request.store,
        "temperature": request.temperature,
        "text": text,
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": list(request.tools or []),
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": usage_body(usage) if usage is not None else None,
        "user": request.user,
    }


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def message_item(item_id: str, text: str, *, status: str = "completed") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    *,
    status: str = "completed",
    names: NamespaceNames | None = None,
) -> dict[str, Any]:
    """A function_call item; a flattened namespace function's call (per `names`) named
    back in its namespace."""
    naming = names.item_fields(name) if names is not None else {"name": name}
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        **naming,
        "arguments": arguments,
    }


def encode_response(completion: bytes, usage: Usage, ctx: ResponseContext) -> dict[str, Any]:
    """A chat.completion body -> the Response object (as JSON-ready builtins)."""
    return encode_decoded(msgspec.json.decode(completion), usage, ctx)


def encode_decoded(body: dict[str, Any], usage: Usage, ctx: ResponseContext) -> dict[str, Any]:
    """`encode_response` of a chat.completion already decoded (the codec reads its usage
    first: one decode, not two)."""
    choices = body.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    text = message.get("content")
    refusal = message.get("refusal")
    calls = message.get("tool_calls") or []
    names = ctx.namespace_names
    if refusal:
        item = message_item(ctx.item_id("msg", 0), "")
        item["content"] = [{"type": "refusal", "refusal": refusal}]
        output.append(item)
    elif text or not calls:
        output.append(message_item(ctx.item_id("msg", 0), text or ""))
    for number, call in enumerate(calls, start=1):
        function = call.get("function") or {}
        output.append(
            function_call_item(
                ctx.item_id("fc", number),
                str(call.get("id") or ctx.item_id("call", number)),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
                names=names,
            )
        )
    reason = _INCOMPLETE.get(str(choice.get("finish_reason")))
    return response_body(
        ctx,
        output,
        status="incomplete" if reason else "completed",
        usage=usage,
        incomplete_reason=reason,
    )


# A whole answer's common case (a chat.completion whose fields have the types OpenAI
# gives them) is read into structs and written from structs: no dict per JSON object
# either way. The bytes are the ones `encode_decoded`'s dict encodes to; any other
# answer takes that path.


class _AnswerMessage(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class _AnswerChoice(msgspec.Struct):
    message: _AnswerMessage | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _AnswerUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Answer(msgspec.Struct):
    choices: list[_AnswerChoice] | None = None
    usage: _AnswerUsage | None = None


_answer_decoder = msgspec.json.Decoder(_Answer)


class _OutputText(msgspec.Struct, gc=False):
    type: str
    text: str
    annotations: tuple[()]


class _MessageItem(msgspec.Struct):
    id: str
    type: str
    role: str
    status: str
    content: list[_OutputText]


class _InputDetails(msgspec.Struct, gc=False):
    cached_tokens: int
    cache_write_tokens: int


class _OutputDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int


class _UsageBody(msgspec.Struct, gc=False):
    input_tokens: int
    input_tokens_details: _InputDetails
    output_tokens: int
    output_tokens_details: _OutputDetails
    total_tokens: int


class _ResponseObject(msgspec.Struct):
    id: str
    object: str
    created_at: int
    status: str
    error: None
    incomplete_details: dict[str, str] | None
    instructions: str | None
    max_output_tokens: int | None
    metadata: dict[str, str]
    model: str
    output: list[Any]
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: Any
    store: bool
    temperature: float | None
    text: Any
    tool_choice: Any
    tools: list[dict[str, Any]]
    top_p: float | None
    truncation: str
    usage: _UsageBody
    user: str | None


def _usage_of(usage: _AnswerUsage | None) -> Usage:
    """`usage_from_chat` of a typed answer's usage."""
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    reasoning = usage.completion_tokens_details
    return Usage(
        usage.prompt_tokens or 0,
        (details.cached_tokens or 0) if details is not None else 0,
        (details.cache_write_tokens or 0) if details is not None else 0,
        0,
        usage.completion_tokens or 0,
        (reasoning.reasoning_tokens or 0) if reasoning is not None else 0,
    )


def _encode_whole(completion: bytes, ctx: EncodeContext) -> bytes:
    """A chat.completion body -> the Response object's JSON."""
    try:
        answer = _answer_decoder.decode(completion)
    except (msgspec.ValidationError, msgspec.DecodeError):
        answer = None
    if answer is None or not answer.choices or answer.choices[0].message is None:
        chat = msgspec.json.decode(completion)
        usage = usage_from_chat(chat.get("usage"))
        return msgspec.json.encode(encode_decoded(chat, usage, response_context(ctx)))
    choice = answer.choices[0]
    message = choice.message
    assert message is not None
    request = _request_of(ctx)
    usage = _usage_of(answer.usage)
    text = message.content
    if message.refusal or message.tool_calls or not isinstance(text, str):
        # refusals and tool calls: the dict path's items
        body = {"choices": [{"message": msgspec.to_builtins(message)}]}
        rctx = ResponseContext(response_id(ctx.request_id), ctx.created, ctx.model, request)
        output = encode_decoded(body, usage, rctx)["output"]
    else:
        # ResponseContext.item_id("msg", 0) of the response id "resp_<request id>"
        item_id = "msg_" + ctx.request_id + "00"
        output = [
            _MessageItem(
                item_id, "message", "assistant", "completed", [_OutputText("output_text", text, ())]
            )
        ]
    reason = _INCOMPLETE.get(str(choice.finish_reason))
    text_config: Any = _TEXT_FORMAT_CONFIG
    if request.text is not None:
        text_config = msgspec.to_builtins(request.text)
        text_config.setdefault("format", {"type": "text"})
    return msgspec.json.encode(
        _ResponseObject(
            response_id(ctx.request_id),
            "response",
            ctx.created,
            "incomplete" if reason else "completed",
            None,
            {"reason": reason} if reason is not None else None,
            request.instructions,
            request.max_output_tokens,
            request.metadata or _NO_METADATA,
            ctx.model,
            output,
            request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
            request.previous_response_id,
            msgspec.to_builtins(request.reasoning) if request.reasoning is not None else None,
            request.store,
            request.temperature,
            text_config,
            request.tool_choice if request.tool_choice is not None else "auto",
            request.tools or _NO_TOOLS,
            request.top_p,
            request.truncation or "disabled",
            _UsageBody(
                usage.input_tokens,
                _InputDetails(usage.cached_input_tokens, usage.cache_write_tokens),
                usage.output_tokens,
                _OutputDetails(usage.reasoning_tokens),
                usage.total_tokens,
            ),
            request.user,
        )
    )


_TEXT_FORMAT_CONFIG: dict[str, Any] = {"format": {"type": "text"}}
_NO_METADATA: dict[str, str] = {}
_NO_TOOLS: list[dict[str, Any]] = []


def error_body(error: GatewayError) -> bytes:
    """Responses API errors have the same envelope as every OpenAI API."""
    body: bytes = error.to_json()
    return body


# -- stream ---------------------------------------------------------------------------


def sse_frame(event: dict[str, Any]) -> bytes:
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + msgspec.json.encode(event) + b"\n\n"


@dataclass(slots=True)
class _OpenCall:
    output_index: int | None
    item_id: str
    call_id: str
    name: str
    # the argument deltas so far, joined when the call closes (a string grown delta by
    # delta is copied whole at every delta: a long patch's arguments come in hundreds)
    argument_parts: list[str] = field(default_factory=list)
    pending: str = ""  # arguments seen before the name (the item is not announced yet)
    done: bool = False


class _ArgumentsFunction(msgspec.Struct):
    arguments: str | None = None


class _ArgumentsCall(msgspec.Struct):
    index: int = 0
    function: _ArgumentsFunction | None = None


class _DeltaOfOne(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ArgumentsCall] | None = None


class _ChoiceOfOne(msgspec.Struct):
    index: int = 0
    delta: _DeltaOfOne | None = None
    finish_reason: str | None = None


class _ChunkOfOne(msgspec.Struct):
    """What of a chat chunk the encoder's fast path reads (every other field skipped): a
    chunk that only adds to one open item, a message's text or a tool call's arguments,
    is most of a stream."""

    choices: list[_ChoiceOfOne] | None = None


_chunk_of_one_decoder = msgspec.json.Decoder(_ChunkOfOne)
_json_encode = msgspec.json.encode
# `sse_frame` of a `response.output_text.delta` event, its fields in the order `_event`
# writes them: the sequence number, the open item's id and index (JSON), the delta (JSON)
_TEXT_DELTA_FRAME = (
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta","sequence_number":%d,'
    b'"item_id":%b,"output_index":%d,"content_index":0,"delta":%b,"logprobs":[]}\n\n'
)
# `sse_frame` of `response.created` or `response.in_progress`: the type (twice), the
# sequence number, the Response (JSON)
_OPENING_FRAME = b'event: %b\ndata: {"type":"%b","sequence_number":%d,"response":%b}\n\n'
# `sse_frame` of a `response.function_call_arguments.delta` event
_ARGUMENTS_DELTA_FRAME = (
    b"event: response.function_call_arguments.delta\n"
    b'data: {"type":"response.function_call_arguments.delta","sequence_number":%d,'
    b'"item_id":%b,"output_index":%d,"delta":%b}\n\n'
)


class ResponsesStreamEncoder:
    """chat.completion.chunk payloads in, Responses SSE frames out.

    Items are announced (`response.output_item.added`) when their first delta arrives
    and closed at the end, or, for a message, when a tool call starts after it; a tool
    call is announced once its name is known. `finish` closes what is open and sends
    `response.completed` (`response.incomplete` when the output was cut short) with the
    whole response and its usage; `response` is that final object, for the store.
    """

    def __init__(self, ctx: ResponseContext) -> None:
        self.ctx = ctx
        self.response: dict[str, Any] | None = None
        self._sequence = 0
        self._started = False
        self._output: list[dict[str, Any]] = []
        self._text_index: int | None = None
        # the open message's deltas, joined when it closes (see _OpenCall.argument_parts)
        self._text_parts: list[str] = []
        # the open message's id as JSON, for the fast path's frames
        self._text_item_json = b""
        self._calls: dict[int, _OpenCall] = {}
        self._numbers = 0
        self._finish_reason: str | None = None
        self._names = ctx.namespace_names

    # -- the protocol

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._text_index is not None or self._calls:
            frame = self._more_of_one(chunk)
            if frame is not None:
                return [frame]
        frames = self._start()
        payload = msgspec.json.decode(chunk)
        for choice in payload.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                frames.extend(self._text_delta(content))
            for call in delta.get("tool_calls") or ():
                frames.extend(self._call_delta(call))
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return frames

    def _more_of_one(self, chunk: bytes) -> bytes | None:
        """The next delta event of the open message or of an announced tool call, if
        `chunk` only adds to its text or arguments (most of a stream): written from a
        template, without the event's dict, the chunk's and a second encoding of both.
        None for anything else, which `feed` reads whole."""
        try:
            choices = _chunk_of_one_decoder.decode(chunk).choices
        except msgspec.ValidationError:
            return None  # a shape the general path reads (or refuses) as it does
        if choices is None or len(choices) != 1:
            return None
        choice = choices[0]
        delta = choice.delta
        if choice.index != 0 or delta is None or choice.finish_reason:
            return None
        content, calls = delta.content, delta.tool_calls
        if content and not calls and self._text_index is not None:
            self._text_parts.append(content)
            sequence = self._sequence
            self._sequence = sequence + 1
            return _TEXT_DELTA_FRAME % (
                sequence,
                self._text_item_json,
                self._text_index,
                _json_encode(content),
            )
        if content or calls is None or len(calls) != 1:
            return None
        function = calls[0].function
        call = self._calls.get(calls[0].index)
        if function is None or not function.arguments or call is None or call.output_index is None:
            return None
        arguments = function.arguments
        call.argument_parts.append(arguments)
        sequence = self._sequence
        self._sequence = sequence + 1
        return _ARGUMENTS_DELTA_FRAME % (
            sequence,
            _json_encode(call.item_id),
            call.output_index,
            _json_encode(arguments),
        )

    def finish(self, usage: Usage | None, cost: Decimal | None = None) -> list[bytes]:
        frames = self._start()
        if not self._output and not self._calls:
            # an empty answer is still one (empty) message, as in the non-streamed body
            frames.extend(self._open_text())
        frames.extend(self._close_text())
        for call in self._calls.values():
            frames.extend(self._close_call(call))
        reason = _INCOMPLETE.get(str(self._finish_reason))
        response = response_body(
            self.ctx,
            [item for item in self._output if item is not None],
            status="incomplete" if reason else "completed",
            usage=usage or Usage(),
            incomplete_reason=reason,
        )
        if cost is not None:
            response["x_gateway"] = {"cost_usd": format(cost.normalize(), "f")}
        self.response = response
        kind = "response.incomplete" if reason else "response.completed"
        frames.append(self._event(kind, response=response))
        return frames

    def error(self, error: GatewayError) -> list[bytes]:
        frames = self._start()
        frames.append(
            self._event(
                "error", code=error.code or error.type, message=error.message, param=error.param
            )
        )
        failed = response_body(
            self.ctx,
            self._output,
            status="failed",
            usage=None,
            error={"code": _failure_code(error), "message": error.message},
        )
        frames.append(self._event("response.failed", response=failed))
        return frames

    # -- items

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        # the two events carry the same Response (its `instructions` echoed whole): one
        # encoding of it serves both
        opening = _json_encode(response_body(self.ctx, [], status="in_progress", usage=None))
        sequence = self._sequence
        self._sequence = sequence + 2
        return [
            _OPENING_FRAME % (b"response.created", b"response.created", sequence, opening),
            _OPENING_FRAME
            % (b"response.in_progress", b"response.in_progress", sequence + 1, opening),
        ]

    def _text_delta(self, content: str) -> list[bytes]:
        frames = self._open_text()
        self._text_parts.append(content)
        assert self._text_index is not None
        frames.append(
            self._event(
                "response.output_text.delta",
                item_id=self._output[self._text_index]["id"],
                output_index=self._text_index,
                content_index=0,
                delta=content,
                logprobs=[],
            )
        )
        return frames

    def _open_text(self) -> list[bytes]:
        frames: list[bytes] = []
        if self._text_index is None:
            item_id = self.ctx.item_id("msg", self._next_number())
            item = message_item(item_id, "", status="in_progress")
            item["content"] = []
            self._text_index = len(self._output)
            self._text_parts = []
            self._text_item_json = _json_encode(item_id)
            self._output.append(item)
            frames.append(
                self._event("response.output_item.added", output_index=self._text_index, item=item)
            )
            frames.append(
                self._event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=self._text_index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
            )
        return frames

    def _close_text(self) -> list[bytes]:
        index = self._text_index
        if index is None:
            return []
        self._text_index = None
        item_id = self._output[index]["id"]
        text = "".join(self._text_parts)
        part = {"type": "output_text", "text": text, "annotations": []}
        item = message_item(item_id, text)
        self._output[index] = item
        return [
            self._event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            ),
            self._event(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=part,
            ),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _call_delta(self, delta: dict[str, Any]) -> list[bytes]:
        frames: list[bytes] = []
        index = int(delta.get("index", 0))
        function = delta.get("function") or {}
        call = self._calls.get(index)
        if call is None:
            number = self._next_number()
            call = _OpenCall(
                output_index=None,
                item_id=self.ctx.item_id("fc", number),
                call_id=str(delta.get("id") or self.ctx.item_id("call", number)),
                name="",
            )
            self._calls[index] = call
        if function.get("name") and not call.name:
            call.name = str(function["name"])
        arguments = str(function.get("arguments") or "")
        if call.output_index is None:
            call.pending += arguments
            if not call.name:
                return frames
            frames.extend(self._close_text())
            call.output_index = len(self._output)
            item = function_call_item(
                call.item_id, call.call_id, call.name, "", status="in_progress", names=self._names
            )
            self._output.append(item)
            frames.append(
                self._event("response.output_item.added", output_index=call.output_index, item=item)
            )
            arguments, call.pending = call.pending, ""
        if arguments:
            call.argument_parts.append(arguments)
            frames.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call.item_id,
                    output_index=call.output_index,
                    delta=arguments,
                )
            )
        return frames

    def _close_call(self, call: _OpenCall) -> list[bytes]:
        if call.done:
            return []
        call.done = True
        frames: list[bytes] = []
        if call.output_index is None:
            # the upstream never named the function: announce it now, nameless
            call.output_index = len(self._output)
            opened = function_call_item(
                call.item_id, call.call_id, call.name, "", status="in_progress", names=self._names
            )
            self._output.append(opened)
            frames.append(
                self._event(
                    "response.output_item.added", output_index=call.output_index, item=opened
                )
            )
            call.argument_parts, call.pending = [call.pending], ""
        arguments = "".join(call.argument_parts)
        item = function_call_item(
            call.item_id, call.call_id, call.name, arguments, names=self._names
        )
        self._output[call.output_index] = item
        frames.append(
            self._event(
                "response.function_call_arguments.done",
                item_id=call.item_id,
                output_index=call.output_index,
                arguments=arguments,
            )
        )
        frames.append(
            self._event("response.output_item.done", output_index=call.output_index, item=item)
        )
        return frames

    def _next_number(self) -> int:
        self._numbers += 1
        return self._numbers - 1

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse_frame(event)


def _failure_code(error: GatewayError) -> str:
    # the Response object's error codes are a fixed set; the gateway's own code is in
    # the `error` event before it
    if error.status == 429:
        return "rate_limit_exceeded"
    return "server_error"


# -- the codec ------------------------------------------------------------------------


def usage_from_chat(usage: Mapping[str, Any] | None) -> Usage:
    """A chat.completion's `usage` (every translation writes OpenAI's shape)."""
    if not usage:
        return Usage()
    details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        cached_input_tokens=int(details.get("cached_tokens") or 0),
        cache_write_tokens=int(details.get("cache_write_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
    )


def response_id(request_id: str) -> str:
    """A translated response's id: the request's, so the two are one in logs and the
    ledger (ids live per tenant in the store, so they need not be secret)."""
    return "resp_" + request_id


def response_context(ctx: EncodeContext) -> ResponseContext:
    return ResponseContext(response_id(ctx.request_id), ctx.created, ctx.model, _request_of(ctx))


def _request_of(ctx: EncodeContext) -> ResponsesRequest:
    """The typed request an answer echoes: the one decoded with the client's body, or
    (a body a stage made anew) converted from it."""
    native = ctx.native
    if type(native) is ResponsesBody:
        return native.request
    request: ResponsesRequest = convert(dict(native or {}), ResponsesRequest)
    return request


_FINAL_EVENTS = (b"response.completed", b"response.incomplete", b"response.failed")


def final_response(answer: bytes) -> dict[str, Any] | None:
    """The Response object in an answer's last bytes: a whole JSON body, or the closing
    SSE frames of a stream (its `response.completed` / `.incomplete` / `.failed`)."""
    if answer.startswith(b"{"):
        body = msgspec.json.decode(answer)
        return body if isinstance(body, dict) and body.get("object") == "response" else None
    found: dict[str, Any] | None = None
    for frame in answer.split(b"\n\n"):
        head, _, data = frame.partition(b"data: ")
        if data and any(kind in head for kind in _FINAL_EVENTS):
            event = msgspec.json.decode(data)
            if isinstance(event, dict) and isinstance(event.get("response"), dict):
                found = event["response"]
    return found


class _Kind(msgspec.Struct):
    type: str


_kind_decoder = msgspec.json.Decoder(_Kind)


class NativeStreamEncoder:
    """A same-API stream: the upstream's event payloads, framed again as SSE events. The
    closing event (`response.completed` / `.incomplete` / `.failed`) is held back for
    `finish`, so the stream's last bytes carry the whole Response (the store keeps it
    before the client can ask for it)."""

    def __init__(self, ctx: EncodeContext) -> None:
        self._previous = (ctx.native or {}).get("previous_response_id")
        self._sequence = 0
        self._closing: list[bytes] = []

    def feed(self, payloads: list[bytes]) -> bytes:
        frames = []
        for payload in payloads:
            kind = _kind_decoder.decode(payload).type
            if self._previous and kind in _LIFECYCLE_KINDS:
                event = msgspec.json.decode(payload)
                event["response"]["previous_response_id"] = self._previous
                payload = msgspec.json.encode(event)
            frame = b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"
            self._sequence += 1
            if kind in _CLOSING_KINDS:
                self._closing.append(frame)
            else:
                frames.append(frame)
        return b"".join(frames)

    def finish(self, held: list[bytes], usage: Usage | None, cost: Decimal | None) -> list[bytes]:
        frames = [self.feed(held)] if held else []
        return [*frames, *self._closing]

    def error(self, error: GatewayError) -> list[bytes]:
        event = {
            "type": "error",
            "sequence_number": self._sequence,
            "code": error.code or error.type,
            "message": error.message,
            "param": error.param,
        }
        return [sse_frame(event)]


_CLOSING_KINDS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_LIFECYCLE_KINDS = frozenset(
    {"response.created", "response.in_progress", "response.completed", "response.incomplete"}
)


class TranslatedStreamEncoder:
    """A stream translated from chat: chunks -> Responses events (see the encoder)."""

    def __init__(self, ctx: EncodeContext) -> None:
        self._encoder = ResponsesStreamEncoder(response_context(ctx))

    def feed(self, payloads: list[bytes]) -> bytes:
        feed = self._encoder.feed
        if len(payloads) == 1:  # a paced stream: one event a read, most often one frame
            frames = feed(payloads[0])
            return frames[0] if len(frames) == 1 else b"".join(frames)
        return b"".join([frame for payload in payloads for frame in feed(payload)])

    def finish(self, held: list[bytes], usage: Usage | None, cost: Decimal | None) -> list[bytes]:
        # `held` is the upstream's usage chunk: its usage is `usage` already
        return self._encoder.finish(usage, cost)

    def error(self, error: GatewayError) -> list[bytes]:
        return self._encoder.error(error)


class OpenAIResponsesCodec:
    """`POST /v1/responses`. A stored conversation (`previous_response_id`) is inlined
    by the pipeline's conversation stage before planning; this codec stays pure."""

    api = OPENAI_RESPONSES

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        return openai_api_key(headers)

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded:
        call = decode(body)
        request, chat = to_chat(call.request, call.input_items)
        return Decoded(
            request,
            chat,
            call.native,
            translation_changes=translation_changes(call.native),
            builtin_tools=(
                tuple(dict.fromkeys(tool.name for tool in call.builtin_tools))
                if call.builtin_tools
                else ()
            ),
        )

    def encode_response(self, completion: bytes, native: bool, ctx: EncodeContext) -> bytes:
        if native:
            previous = (ctx.native or {}).get("previous_response_id")
            if not previous:
                return completion
            body = msgspec.json.decode(completion)
            body["previous_response_id"] = previous
            return msgspec.json.encode(body)
        return _encode_whole(completion, ctx)

    def stream_encoder(
        self, native: bool, ctx: EncodeContext
    ) -> NativeStreamEncoder | TranslatedStreamEncoder:
        return NativeStreamEncoder(ctx) if native else TranslatedStreamEncoder(ctx)

    def error_body(self, error: GatewayError) -> bytes:
        return error_body(error)
