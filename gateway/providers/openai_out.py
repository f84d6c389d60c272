"""What the translations from non-OpenAI APIs (Anthropic, Gemini) share: reading the
OpenAI request's parts they all convert the same way (data URLs, tool-call arguments,
assistant text), writing OpenAI completions and stream chunks, and the errors whose
wording must not differ between providers (refused credentials, unreadable answers,
a key echoed back in a provider's message).

Pure functions, like the translations that use them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.errors import InvalidRequest, UpstreamMisconfigured, UpstreamUnavailable
from gateway.providers.base import Call, Target
from gateway.usage import Usage
from gateway.wire import openai

REDACTED = "[redacted]"

# -- reading the OpenAI request -----------------------------------------------------


def parse_data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a base64 `data:` URL, or None for any other URL."""
    if not url.startswith("data:"):
        return None
    header, sep, data = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    return header.removesuffix(";base64").split(";")[0].lower(), data


def arguments_object(arguments: str, param: str) -> dict[str, Any]:
    """A tool call's `arguments` string as the JSON object both APIs want (an empty
    string is no arguments); anything else is the client's error, named by `param`."""
    if not arguments.strip():
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except UNREADABLE:
        raise InvalidRequest("tool call arguments must be a JSON object", param=param) from None
    if not isinstance(value, dict):
        raise InvalidRequest("tool call arguments must be a JSON object", param=param)
    return value


FunctionChoice = Literal["none", "auto", "required"] | openai.NamedToolChoice


def function_tools(
    request: openai.ChatRequest, vendor: str
) -> tuple[list[openai.Tool], FunctionChoice | None]:
    """The request's tools and tool choice in the terms both APIs have: function tools
    only (a `custom` tool is refused, naming it), and an `allowed_tools` choice resolved
    to the allowed subset of the tools with its mode."""
    for i, tool in enumerate(request.tools or ()):
        if not isinstance(tool, openai.Tool):
            raise InvalidRequest(
                f"{vendor} models take function tools only; tools[{i}] is a custom tool",
                param=f"tools[{i}].type",
            )
    tools = request.function_tools()
    choice = request.tool_choice
    if isinstance(choice, openai.NamedCustomToolChoice):
        raise InvalidRequest(
            f"{vendor} models take function tools only; tool_choice names a custom tool",
            param="tool_choice.type",
        )
    if isinstance(choice, openai.AllowedToolsChoice):
        allowed = set(choice.allowed_tools.names())
        tools = [tool for tool in tools if tool.function.name in allowed]
        if not tools:
            raise InvalidRequest(
                "tool_choice.allowed_tools names none of the function tools in `tools`",
                param="tool_choice.allowed_tools.tools",
            )
        return tools, choice.allowed_tools.mode
    return tools, choice


def function_tool_call(call: openai.AnyToolCall, param: str, vendor: str) -> openai.ToolCall:
    """An assistant turn's tool call, which must be a function call for `vendor`."""
    if not isinstance(call, openai.ToolCall):
        raise InvalidRequest(
            f"{vendor} models take function tool calls only; this one is a custom tool call",
            param=f"{param}.type",
        )
    return call


def positive_output_limit(request: openai.ChatRequest, vendor: str) -> int | None:
    """The client's token cap, refused when it is 0 (which neither API can express)."""
    limit = request.output_limit
    if limit == 0:
        field = "max_completion_tokens" if request.max_completion_tokens == 0 else "max_tokens"
        raise InvalidRequest(f"{vendor} models need {field} of at least 1", param=field)
    return limit


def assistant_texts(message: openai.Message) -> list[str]:
    """The text of an assistant message, one string per text or refusal part."""
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    for part in content:
        if isinstance(part, openai.TextPart):
            texts.append(part.text)
        elif isinstance(part, openai.RefusalPart):
            texts.append(part.refusal)
    return texts


# -- writing OpenAI answers ---------------------------------------------------------


def completion_id(call: Call) -> str:
    return f"chatcmpl-{call.request_id}"


def completion_body(call: Call, choices: list[openai.Choice], usage: Usage, model: str) -> bytes:
    """A `chat.completion` body answering `call`, under the served `model`
    (gateway.wire.served_model)."""
    completion = openai.ChatCompletion(
        id=completion_id(call),
        created=call.created,
        model=model,
        choices=choices,
        usage=usage.to_openai(),
    )
    return openai.encoder.encode(completion)


class ChunkWriter:
    """Encodes the `chat.completion.chunk` payloads of one stream: every chunk carries
    the same id, creation time and served model name, as OpenAI's do. `model` starts as
    the deployment's model id; a stream that names its model sets it before its first
    chunk (gateway.wire.served_model)."""

    __slots__ = ("_created", "_id", "model")

    def __init__(self, call: Call, model: str) -> None:
        self._id = completion_id(call)
        self._created = call.created
        self.model = model

    def delta(
        self, delta: openai.Delta, finish: openai.FinishReason | None = None, index: int = 0
    ) -> bytes:
        choice = openai.ChunkChoice(index=index, delta=delta, finish_reason=finish)
        return self._encode([choice])

    def usage(self, usage: Usage | None) -> bytes:
        """The last chunk: no choices, the stream's usage (zeros if it reported none)."""
        return self._encode([], (usage or Usage()).to_openai())

    def _encode(
        self, choices: list[openai.ChunkChoice], usage: dict[str, Any] | None = None
    ) -> bytes:
        chunk = openai.ChatCompletionChunk(
            id=self._id,
            created=self._created,
            model=self.model,
            choices=choices,
            usage=usage if usage is not None else msgspec.UNSET,
        )
        return openai.encoder.encode(chunk)


# -- errors -------------------------------------------------------------------------


def redact(message: str, target: Target) -> str:
    """A provider's message with the provider's key taken out, should it quote it."""
    key = target.settings.api_key
    secret = key.get_secret_value() if key is not None else ""
    return message.replace(secret, REDACTED) if secret else message


def credentials_refused(
    vendor: str, target: Target, detail: str, status: int, key_variable: str
) -> UpstreamMisconfigured:
    """The upstream refused our key: a 502 that tells the operator which config entry
    to fix. `detail` must already be redacted."""
    provider = target.provider
    return UpstreamMisconfigured(
        f"{vendor} refused the credentials of provider '{provider}' ({detail}). Check "
        f"`providers.{provider}.api_key` in the server config and the environment variable "
        f"it references (e.g. {key_variable}).",
        provider=provider,
        upstream_status=status,
    )


# what decoding an upstream's bytes can raise: malformed or mistyped JSON, bytes that are
# not UTF-8, nesting deeper than the decoder's recursion limit
UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def malformed_usage(provider: str, detail: str) -> UpstreamUnavailable:
    """An upstream's answer whose usage cannot be metered: a 502 naming the provider."""
    return UpstreamUnavailable(
        f"provider '{provider}' returned a malformed usage ({detail})",
        provider=provider,
        retryable=False,
    )


def token_count(value: object, field: str, provider: str) -> int:
    """One token count of an upstream's usage, checked: a non-negative integer (a
    whole-number float is taken as one), or absent."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed_usage(provider, f"{field} is {str(msgspec.json.encode(value))[:40]}")
    return value


def checked_usage(usage: Usage, provider: str) -> Usage:
    """`usage` if every count in it is non-negative (typed decoders check the types)."""
    for field in Usage.__struct_fields__:
        value = getattr(usage, field)
        if not isinstance(value, bool) and value < 0:
            raise malformed_usage(provider, f"{field} is {value}")
    return usage


def unreadable(target: Target, what: str) -> UpstreamUnavailable:
    """The upstream answered with something that is not `what` (not worth retrying:
    the same upstream would answer the same way)."""
    return UpstreamUnavailable(
        f"provider '{target.provider}' returned {what}",
        provider=target.provider,
        retryable=False,
    )
