"""Google Gemini API translation: OpenAI chat in, `POST {base}/v1beta/models/{model}:
generateContent` (or `:streamGenerateContent?alt=sse`) out, and Gemini's answers back
as OpenAI shapes.

Choices that are not one-to-one, so users can predict them:

- `system` and `developer` messages, wherever they appear, become `systemInstruction`
  parts in order. Roles: user -> "user", assistant -> "model", tool -> a "user" turn of
  `functionResponse` parts; consecutive turns with the same role are merged.
- A `tool` message's content becomes `functionResponse.response` as is when it is a JSON
  object, else `{"output": <content>}` (the key Gemini's docs use). Gemini needs the
  function's name, which it takes from the earlier assistant tool call with that id.
- Gemini function calls may carry no id: ids are made up as `call_<request id>_<n>`.
  A call's `thoughtSignature` (which Gemini 3 wants back) rides along at the end of the
  id after `__thought__` and is returned to Gemini on the next turn.
- JSON output: `response_format` json_object -> `responseMimeType: application/json`;
  json_schema -> that plus `responseSchema`. Tool parameters use the same schema
  conversion: Gemini speaks an OpenAPI subset, so `$ref`/`$defs` are inlined, `type`
  lists and `anyOf` with null become `nullable`, `const` becomes a one-value enum, and
  keywords it refuses (`additionalProperties`, `default`, `$schema`, non-string enums,
  string formats other than `enum`/`date-time`, ...) are dropped.
- Images: data URLs -> `inlineData`; http(s) URLs -> `fileData` with the MIME type
  guessed from the file extension (omitted when the extension is unknown). Audio
  parts -> `inlineData` audio/<format>.
- `parallel_tool_calls` has no Gemini equivalent and is ignored; `n` -> candidateCount.
- Usage: `promptTokenCount` already includes cached tokens; output is candidates plus
  thoughts, and thoughts are the reasoning tokens.
- `reasoning_effort` becomes `thinkingConfig`: a `thinkingBudget` of 1024 (minimal),
  2048 (low), 8192 (medium) or 24576 (high) tokens with the thoughts included in the
  answer (as `reasoning_content`); "none" is a budget of 0, thinking off (not sent to
  a model whose catalog entry does not list `reasoning`). `top_k` (an
  extension SGLang and vLLM read, and what the Anthropic ingress sends) becomes `topK`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from gateway.errors import (
    InvalidRequest,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.providers.base import Call, Target, Translated, UpstreamRequest
from gateway.providers.builtin_tools import plan_builtin_tools
from gateway.providers.dropped_fields import GEMINI_CARRIED, dropped_fields
from gateway.providers.openai_out import (
    UNREADABLE,
    ChunkWriter,
    FunctionChoice,
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
from gateway.wire import gemini as wire
from gateway.wire import openai
from gateway.wire.apis import OPENAI_CHAT
from gateway.wire.served_model import served_model

FILTERED = (
    "SAFETY",
    "RECITATION",
    "LANGUAGE",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "MODEL_ARMOR",
)
FINISH_REASONS: dict[str, openai.FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    **{reason: "content_filter" for reason in FILTERED},
}

STATUS_CODES = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}

MIME_BY_EXTENSION = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "heic": "image/heic",
    "heif": "image/heif",
    "pdf": "application/pdf",
    "mp3": "audio/mp3",
    "wav": "audio/wav",
    "mp4": "video/mp4",
    "txt": "text/plain",
}

THOUGHT_SEPARATOR = "__thought__"
THINKING_BUDGETS = {"none": 0, "minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}

_SCHEMA_TYPES = {"string", "number", "integer", "boolean", "array", "object"}
_KEPT_KEYWORDS = (
    "description",
    "title",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "pattern",
    "propertyOrdering",
)
_FORMATS = {
    "STRING": ("enum", "date-time"),
    "INTEGER": ("int32", "int64"),
    "NUMBER": ("float", "double"),
}
_MAX_SCHEMA_DEPTH = 32


# -- JSON Schema -> Gemini schema -----------------------------------------------------


def to_gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Gemini's OpenAPI-subset schema for a JSON Schema (see the module docstring)."""
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            defs.update(schema[key])
    return _convert_schema(schema, defs, 0)


def _convert_schema(schema: Any, defs: Mapping[str, Any], depth: int) -> dict[str, Any]:
    if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        # a recursive schema: Gemini has no references, so cut it off as an open object
        return {"type": "OBJECT"}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        merged = {**(target or {}), **{k: v for k, v in schema.items() if k != "$ref"}}
        return _convert_schema(merged, defs, depth + 1)
    out: dict[str, Any] = {}
    variants = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(variants, list):
        kept = [v for v in variants if not (isinstance(v, Mapping) and v.get("type") == "null")]
        if len(kept) < len(variants):
            out["nullable"] = True
        if len(kept) == 1:
            out.update(_convert_schema(kept[0], defs, depth + 1))
        elif kept:
            out["anyOf"] = [_convert_schema(v, defs, depth + 1) for v in kept]
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        for part in all_of:
            out.update(_convert_schema(part, defs, depth + 1))
    _convert_type(schema, out)
    for key in _KEPT_KEYWORDS:
        if key in schema:
            out[key] = schema[key]
    _convert_enum(schema, out)
    if isinstance(schema.get("properties"), Mapping):
        properties = {
            name: _convert_schema(sub, defs, depth + 1)
            for name, sub in schema["properties"].items()
        }
        out["properties"] = properties
        if isinstance(schema.get("required"), list):
            out["required"] = [name for name in schema["required"] if name in properties]
    items = schema.get("items")
    if isinstance(items, list):
        items = items[0] if items else None
    if isinstance(items, Mapping):
        out["items"] = _convert_schema(items, defs, depth + 1)
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS.get(str(out.get("type")), ()):
        out["format"] = fmt
    return out


def _convert_type(schema: Mapping[str, Any], out: dict[str, Any]) -> None:
    kind = schema.get("type")
    if isinstance(kind, list):
        if "null" in kind:
            out["nullable"] = True
        kinds = [k for k in kind if k in _SCHEMA_TYPES]
        if len(kinds) == 1:
            out["type"] = kinds[0].upper()
        elif kinds:
            out["anyOf"] = [{"type": k.upper()} for k in kinds]
    elif isinstance(kind, str) and kind in _SCHEMA_TYPES:
        out["type"] = kind.upper()
    elif "properties" in schema:
        out["type"] = "OBJECT"


def _convert_enum(schema: Mapping[str, Any], out: dict[str, Any]) -> None:
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        out["enum"] = list(values)
        out.setdefault("type", "STRING")


# -- request ------------------------------------------------------------------------


def models_url(base_url: str, model: str, *, stream: bool) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/v1beta"):
        base += "/v1beta"
    if stream:
        return f"{base}/models/{model}:streamGenerateContent?alt=sse"
    return f"{base}/models/{model}:generateContent"


def request_headers(target: Target) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    headers.update(target.settings.headers)
    if target.settings.api_key is not None:
        headers["x-goog-api-key"] = target.settings.api_key.get_secret_value()
    return headers


def to_generate_request(call: Call, reasoning: bool = True) -> wire.GenerateContentRequest:
    """The Gemini request for one OpenAI chat request (raises InvalidRequest for what
    Gemini cannot express)."""
    request = call.request
    system, contents = convert_messages(request.messages)
    if not contents:
        raise InvalidRequest("at least one user or assistant message is required", param="messages")
    body = wire.GenerateContentRequest(contents=contents)
    if system:
        body.system_instruction = wire.Content(parts=[wire.Part(text=t) for t in system])
    tools, choice = function_tools(request, "Gemini")
    if tools:
        body.tools = [wire.Tool(function_declarations=[_declaration(tool) for tool in tools])]
        tool_config = _tool_config(choice)
        if tool_config is not None:
            body.tool_config = tool_config
    config = _generation_config(request)
    _add_raw_options(config, call.raw, reasoning)
    if config != wire.GenerationConfig():
        body.generation_config = config
    return body


def convert_messages(messages: list[openai.Message]) -> tuple[list[str], list[wire.Content]]:
    system: list[str] = []
    contents: list[wire.Content] = []
    names: dict[str, str] = {}
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if message.role in ("system", "developer"):
            if text := message.text():
                system.append(text)
        elif message.role == "user":
            _append(contents, "user", _user_parts(message, param))
        elif message.role == "assistant":
            _append(contents, "model", _model_parts(message, param, names))
        elif message.role == "tool":
            _append(contents, "user", [_function_response(message, param, names)])
        else:
            raise InvalidRequest(
                "the deprecated 'function' role is not supported; use 'tool' messages",
                param=f"{param}.role",
            )
    return system, contents


def _append(contents: list[wire.Content], role: str, parts: list[wire.Part]) -> None:
    if not parts:
        return
    if contents and contents[-1].role == role:
        contents[-1].parts.extend(parts)
    else:
        contents.append(wire.Content(parts=parts, role=role))


def _user_parts(message: openai.Message, param: str) -> list[wire.Part]:
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [wire.Part(text=content)] if content else []
    parts: list[wire.Part] = []
    for j, part in enumerate(content):
        where = f"{param}.content[{j}]"
        if isinstance(part, openai.TextPart):
            if part.text:
                parts.append(wire.Part(text=part.text))
        elif isinstance(part, openai.ImagePart):
            parts.append(_media_part(part.image_url.url, f"{where}.image_url"))
        elif isinstance(part, openai.AudioPart):
            audio = part.input_audio
            blob = wire.Blob(mime_type=f"audio/{audio.format}", data=audio.data)
            parts.append(wire.Part(inline_data=blob))
        elif isinstance(part, openai.FilePart):
            parts.append(_media_part(str(part.file.get("file_data") or ""), f"{where}.file"))
        else:
            parts.append(wire.Part(text=part.refusal))
    return parts


def guess_mime_type(url: str) -> str | None:
    path = url.split("?", 1)[0].split("#", 1)[0]
    name = path.rsplit("/", 1)[-1]
    if "." not in name:
        return None
    return MIME_BY_EXTENSION.get(name.rsplit(".", 1)[-1].lower())


def _media_part(url: str, param: str) -> wire.Part:
    if url.startswith(("http://", "https://")):
        mime = guess_mime_type(url)
        file_data = wire.FileData(file_uri=url, mime_type=mime if mime else UNSET)
        return wire.Part(file_data=file_data)
    parsed = parse_data_url(url)
    if parsed is None:
        raise InvalidRequest("expected an http(s) URL or a base64 data URL", param=param)
    return wire.Part(inline_data=wire.Blob(mime_type=parsed[0], data=parsed[1]))


def _model_parts(message: openai.Message, param: str, names: dict[str, str]) -> list[wire.Part]:
    parts = [wire.Part(text=text) for text in assistant_texts(message) if text]
    if isinstance(message.tool_calls, list):
        for k, any_call in enumerate(message.tool_calls):
            call = function_tool_call(any_call, f"{param}.tool_calls[{k}]", "Gemini")
            names[call.id] = call.function.name
            where = f"{param}.tool_calls[{k}].function.arguments"
            function_call = wire.FunctionCall(
                name=call.function.name, args=arguments_object(call.function.arguments, where)
            )
            _, sep, signature = call.id.partition(THOUGHT_SEPARATOR)
            parts.append(
                wire.Part(
                    function_call=function_call, thought_signature=signature if sep else UNSET
                )
            )
    return parts


def _function_response(message: openai.Message, param: str, names: dict[str, str]) -> wire.Part:
    call_id = message.tool_call_id
    if not isinstance(call_id, str) or call_id not in names:
        raise InvalidRequest(
            "tool_call_id does not match a tool call of an earlier assistant message; "
            "Gemini needs the function's name",
            param=f"{param}.tool_call_id",
        )
    text = message.text()
    response: dict[str, Any]
    try:
        decoded = msgspec.json.decode(text) if text.lstrip().startswith("{") else None
    except UNREADABLE:
        decoded = None
    response = decoded if isinstance(decoded, dict) else {"output": text}
    return wire.Part(
        function_response=wire.FunctionResponse(name=names[call_id], response=response)
    )


def _declaration(tool: openai.Tool) -> wire.FunctionDeclaration:
    declaration = wire.FunctionDeclaration(
        name=tool.function.name, description=tool.function.description
    )
    parameters = tool.function.parameters
    # Gemini refuses an OBJECT without properties: a function without arguments has none
    if isinstance(parameters, dict) and parameters.get("properties"):
        converted = to_gemini_schema(parameters)
        if _has_open_object(converted):
            # a free-form object (e.g. `metadata: {type: object}`) has no form in Gemini's
            # OpenAPI subset: such a function's schema goes as JSON Schema, which it reads
            declaration.parameters_json_schema = dict(parameters)
        else:
            declaration.parameters = converted
    return declaration


def _has_open_object(schema: Any) -> bool:
    """Whether a converted schema has an OBJECT without properties below its top."""
    if not isinstance(schema, dict):
        return False
    inner = [*(schema.get("properties") or {}).values(), *(schema.get("anyOf") or [])]
    if "items" in schema:
        inner.append(schema["items"])
    return any(
        (isinstance(sub, dict) and sub.get("type") == "OBJECT" and not sub.get("properties"))
        or _has_open_object(sub)
        for sub in inner
    )


def _tool_config(choice: FunctionChoice | None) -> wire.ToolConfig | None:
    if choice is None:
        return None
    if isinstance(choice, openai.NamedToolChoice):
        config = wire.FunctionCallingConfig(
            mode="ANY", allowed_function_names=[choice.function.name]
        )
    else:
        config = wire.FunctionCallingConfig(
            mode={"auto": "AUTO", "none": "NONE", "required": "ANY"}[choice]
        )
    return wire.ToolConfig(config)


def thinking_config(effort: Any) -> wire.ThinkingConfig | None:
    """Gemini's thinking settings for OpenAI's `reasoning_effort` (None: not given)."""
    if effort is None:
        return None
    if effort == "xhigh":
        effort = "high"
    if effort not in THINKING_BUDGETS:
        raise InvalidRequest(
            f"reasoning_effort must be one of {', '.join(THINKING_BUDGETS)}",
            param="reasoning_effort",
        )
    budget = THINKING_BUDGETS[effort]
    return wire.ThinkingConfig(thinking_budget=budget, include_thoughts=budget > 0)


def _add_raw_options(
    config: wire.GenerationConfig, raw: Mapping[str, Any], reasoning: bool
) -> None:
    """Options the typed chat request does not model, read from the client's body."""
    thinking = thinking_config(raw.get("reasoning_effort"))
    if thinking is not None and reasoning:
        config.thinking_config = thinking
    top_k = raw.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0:
        config.top_k = top_k


def _generation_config(request: openai.ChatRequest) -> wire.GenerationConfig:
    config = wire.GenerationConfig()
    limit = positive_output_limit(request, "Gemini")
    if limit is not None:
        config.max_output_tokens = limit
    if request.temperature is not None:
        config.temperature = request.temperature
    if request.top_p is not None:
        config.top_p = request.top_p
    if request.stop is not None:
        config.stop_sequences = request.stop_sequences()
    if request.n is not None and request.n > 1:
        config.candidate_count = request.n
    if request.seed is not None:
        config.seed = request.seed
    if request.presence_penalty is not None:
        config.presence_penalty = request.presence_penalty
    if request.frequency_penalty is not None:
        config.frequency_penalty = request.frequency_penalty
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        config.response_mime_type = "application/json"
        spec = fmt.json_schema
        if isinstance(spec, openai.JSONSchemaFormat) and isinstance(spec.schema, dict):
            schema = to_gemini_schema(spec.schema)
            # an open object has no Gemini form (OBJECT needs properties): JSON mode only
            if schema.get("type") != "OBJECT" or schema.get("properties"):
                config.response_schema = schema
    return config


# -- response -----------------------------------------------------------------------


def usage_from_gemini(metadata: wire.UsageMetadata | None) -> Usage:
    if metadata is None:
        return Usage()
    return Usage(
        input_tokens=metadata.prompt_token_count + metadata.tool_use_prompt_token_count,
        cached_input_tokens=metadata.cached_content_token_count,
        output_tokens=metadata.candidates_token_count + metadata.thoughts_token_count,
        reasoning_tokens=metadata.thoughts_token_count,
    )


def tool_call_id(
    call: Call, function_call: wire.ResponseFunctionCall, n: int, signature: str | None
) -> str:
    base = function_call.id or f"call_{call.request_id}_{n}"
    return f"{base}{THOUGHT_SEPARATOR}{signature}" if signature else base


def finish_reason(reason: str | None, *, has_tool_calls: bool) -> openai.FinishReason:
    finish = FINISH_REASONS.get(reason or "STOP", "stop")
    return "tool_calls" if finish == "stop" and has_tool_calls else finish


def _candidate_parts(candidate: wire.Candidate) -> list[wire.ResponsePart]:
    if candidate.content is None or candidate.content.parts is None:
        return []
    return candidate.content.parts


def to_choices(response: wire.GenerateContentResponse, call: Call) -> list[openai.Choice]:
    """One OpenAI choice per candidate, in index order (call ids use the request id)."""
    choices: list[openai.Choice] = []
    tool_number = 0
    for position, candidate in enumerate(response.candidates or ()):
        texts: list[str] = []
        thoughts: list[str] = []
        tool_calls: list[openai.ToolCall] = []
        for part in _candidate_parts(candidate):
            if part.function_call is not None:
                arguments = msgspec.json.encode(part.function_call.args or {}).decode()
                call_id = tool_call_id(
                    call, part.function_call, tool_number, part.thought_signature
                )
                tool_number += 1
                tool_calls.append(
                    openai.ToolCall(
                        id=call_id,
                        function=openai.FunctionCall(part.function_call.name, arguments),
                    )
                )
            elif part.text is not None:
                (thoughts if part.thought else texts).append(part.text)
        message = openai.ResponseMessage(
            content="".join(texts) if texts or not tool_calls else None,
            tool_calls=tool_calls or UNSET,
            reasoning_content="".join(thoughts) if thoughts else UNSET,
        )
        index = candidate.index if candidate.index is not None else position
        finish = finish_reason(candidate.finish_reason, has_tool_calls=bool(tool_calls))
        choices.append(openai.Choice(index=index, message=message, finish_reason=finish))
    if not choices:
        # the prompt itself was blocked: Gemini answers with promptFeedback only
        blocked = response.prompt_feedback is not None and response.prompt_feedback.block_reason
        choices.append(
            openai.Choice(
                index=0,
                message=openai.ResponseMessage(content=""),
                finish_reason="content_filter" if blocked else "stop",
            )
        )
    return sorted(choices, key=lambda choice: choice.index)


# -- stream -------------------------------------------------------------------------


class GeminiStream:
    """Gemini `alt=sse` events (each a GenerateContentResponse) in, OpenAI
    `chat.completion.chunk` payloads out.

    Gemini's running usage counts the prompt; the output count is final only on the
    last event, with the finish reasons: the text streamed before it is kept, so a
    stream abandoned mid-way is billed for it (counted offline, marked estimated)."""

    # no per-chunk token estimate: the streamed text is counted instead
    content_chunks: int | None = None

    def __init__(self, call: Call, target: Target) -> None:
        self.usage: Usage | None = None
        self._unreported: list[str] = []
        self._call = call
        self._target = target
        self._chunks = ChunkWriter(call, target.upstream_model)
        self._started: set[int] = set()
        self._finished: set[int] = set()
        self._tools: dict[int, int] = {}
        self._tool_number = 0

    def feed(self, event: SSEEvent) -> list[bytes]:
        if not event.data.strip():
            return []
        try:
            response = wire.response_decoder.decode(event.data)
        except UNREADABLE:
            raise unreadable(self._target, "a malformed stream event") from None
        if response.error is not None:
            raise error_from_gemini(response.error.code, response.error, {}, self._target)
        if not self._started:
            # every event names the model version; the first one names the stream's
            self._chunks.model = served_model(response.model_version, self._chunks.model)
        if response.usage_metadata is not None:
            usage = usage_from_gemini(response.usage_metadata)
            self.usage = checked_usage(usage, self._target.provider)
        out: list[bytes] = []
        for position, candidate in enumerate(response.candidates or ()):
            index = candidate.index if candidate.index is not None else position
            out.extend(self._candidate(index, candidate))
        feedback = response.prompt_feedback
        if not response.candidates and feedback is not None and feedback.block_reason:
            out.extend(self._start(0))
            out.extend(self._finish_chunk(0, "content_filter"))
        if response.usage_metadata is not None and self._finished >= self._started:
            # every candidate has finished: this event's usage is the final count
            self._unreported.clear()
        return out

    @property
    def unreported_text(self) -> str | None:
        return "".join(self._unreported) if self._unreported else None

    def finish(self) -> list[bytes]:
        return [self._chunks.usage(self.usage)]

    def _chunk(
        self, index: int, delta: openai.Delta, finish: openai.FinishReason | None = None
    ) -> bytes:
        return self._chunks.delta(delta, finish, index)

    def _start(self, index: int) -> list[bytes]:
        if index in self._started:
            return []
        self._started.add(index)
        return [self._chunk(index, openai.Delta(role="assistant", content=""))]

    def _candidate(self, index: int, candidate: wire.Candidate) -> list[bytes]:
        if index in self._finished:
            return []
        out = self._start(index)
        for part in _candidate_parts(candidate):
            if part.function_call is not None:
                out.extend(self._tool_call(index, part))
            elif part.text:
                self._unreported.append(part.text)
                delta = (
                    openai.Delta(reasoning_content=part.text)
                    if part.thought
                    else openai.Delta(content=part.text)
                )
                out.append(self._chunk(index, delta))
        if candidate.finish_reason is not None:
            has_tools = self._tools.get(index, 0) > 0
            finish = finish_reason(candidate.finish_reason, has_tool_calls=has_tools)
            out.extend(self._finish_chunk(index, finish))
        return out

    def _tool_call(self, index: int, part: wire.ResponsePart) -> list[bytes]:
        assert part.function_call is not None
        tool_index = self._tools.get(index, 0)
        self._tools[index] = tool_index + 1
        call_id = tool_call_id(
            self._call, part.function_call, self._tool_number, part.thought_signature
        )
        self._tool_number += 1
        opening = openai.ChunkToolCall(
            index=tool_index,
            id=call_id,
            type="function",
            function=openai.ChunkFunctionCall(name=part.function_call.name, arguments=""),
        )
        encoded = msgspec.json.encode(part.function_call.args or {}).decode()
        self._unreported.append(part.function_call.name + encoded)
        arguments = openai.ChunkToolCall(
            index=tool_index, function=openai.ChunkFunctionCall(arguments=encoded)
        )
        return [
            self._chunk(index, openai.Delta(tool_calls=[opening])),
            self._chunk(index, openai.Delta(tool_calls=[arguments])),
        ]

    def _finish_chunk(self, index: int, finish: openai.FinishReason) -> list[bytes]:
        if index in self._finished:
            return []
        self._finished.add(index)
        return [self._chunk(index, openai.Delta(), finish)]


# -- errors -------------------------------------------------------------------------


def error_from_gemini(
    status: int, error: wire.ErrorStatus, headers: Mapping[str, str], target: Target
) -> UpstreamError:
    provider = target.provider
    message = redact(error.message, target) or f"HTTP {status}"
    code = error.status or None
    auth_codes = ("UNAUTHENTICATED", "PERMISSION_DENIED")
    if status in (401, 403) or code in auth_codes or _key_invalid(error):
        detail = f"{code or status}: {message}"
        return credentials_refused("Gemini", target, detail, status, "GEMINI_API_KEY")
    retry_after = retry_after_seconds(headers)
    if retry_after is None:
        retry_after = _retry_delay(error)
    if status == 429 or code == "RESOURCE_EXHAUSTED":
        return UpstreamRejected(
            f"Gemini rate limit or quota for provider '{provider}': {message}",
            status=429,
            provider=provider,
            retryable=True,
            retry_after=retry_after,
            code=code,
        )
    if status == 504 or code == "DEADLINE_EXCEEDED":
        return UpstreamTimeout(
            f"Gemini timed out for provider '{provider}': {message}",
            provider=provider,
            upstream_status=status,
            retry_after=retry_after,
        )
    if 400 <= status < 500 and code not in ("INTERNAL", "UNAVAILABLE"):
        return UpstreamRejected(
            message,
            status=status,
            provider=provider,
            retryable=False,
            code=code,
            param=_violated_field(error),
        )
    return UpstreamUnavailable(
        f"Gemini failed for provider '{provider}' ({status} {code or ''}): {message}",
        provider=provider,
        upstream_status=status,
        retry_after=retry_after,
    )


def _key_invalid(error: wire.ErrorStatus) -> bool:
    return any(detail.get("reason") == "API_KEY_INVALID" for detail in error.details)


def _violated_field(error: wire.ErrorStatus) -> str | None:
    """The field Gemini's `google.rpc.BadRequest` detail names, if any."""
    for detail in error.details:
        violations = detail.get("fieldViolations")
        if isinstance(violations, list):
            for violation in violations:
                field = violation.get("field") if isinstance(violation, dict) else None
                if isinstance(field, str) and field:
                    return field
    return None


def _retry_delay(error: wire.ErrorStatus) -> float | None:
    """Gemini's `google.rpc.RetryInfo` detail: `"retryDelay": "12s"`."""
    for detail in error.details:
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                return None
    return None


# -- the translation ----------------------------------------------------------------


class GeminiTranslation:
    api = OPENAI_CHAT

    def build_request(self, call: Call, target: Target) -> UpstreamRequest:
        body = to_generate_request(call, target.reasoning)
        stream = call.request.stream
        # Gemini 2.x grounds with Google Search only in requests without functions
        # ("Tool use with function calling is unsupported"): with functions, it is dropped
        searchable = ("google_search",) if isinstance(body.tools, UnsetType) else ()
        builtin = plan_builtin_tools(call, target, searchable)
        if builtin is not None and builtin.web_search:
            body.tools = [wire.Tool(google_search={})]
        return UpstreamRequest(
            url=models_url(target.base_url, target.upstream_model, stream=stream),
            body=msgspec.json.encode(body),
            headers=request_headers(target),
            stream=stream,
            changes=dropped_fields(call.raw, GEMINI_CARRIED)
            + (builtin.changes if builtin is not None else []),
        )

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated:
        try:
            response = wire.response_decoder.decode(body)
        except UNREADABLE:
            raise unreadable(target, "a body that is not a Gemini response") from None
        usage = checked_usage(usage_from_gemini(response.usage_metadata), target.provider)
        model = served_model(response.model_version, target.upstream_model)
        return Translated(completion_body(call, to_choices(response, call), usage, model), usage)

    def stream(self, call: Call, target: Target) -> GeminiStream:
        return GeminiStream(call, target)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        try:
            error = wire.error_decoder.decode(body).error
        except UNREADABLE:
            error = wire.ErrorStatus(
                code=status, message=body[:200].decode("utf-8", "replace").strip()
            )
        if not error.status:
            error.status = next((s for s, c in STATUS_CODES.items() if c == status), "")
        return error_from_gemini(status, error, headers, target)
