"""What the translations from non-OpenAI APIs (Anthropic, Gemini) share: reading the
OpenAI request's parts they all convert the same way (data URLs, tool-call arguments,
assistant text), writing OpenAI completions and stream chunks, and the errors whose
wording must not differ between providers (refused credentials, unreadable answers,
a key echoed back in a provider's message).

Pure functions, like the translations that use them.
"""

from __future__ import annotations

from typing import Any

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
    except msgspec.DecodeError:
        raise InvalidRequest("tool call arguments must be a JSON object", param=param) from None
    if not isinstance(value, dict):
        raise InvalidRequest("tool call arguments must be a JSON object", param=param)
    return value


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


def completion_body(call: Call, choices: list[openai.Choice], usage: Usage) -> bytes:
    """A `chat.completion` body answering `call`, under the model name the client used."""
    completion = openai.ChatCompletion(
        id=completion_id(call),
        created=call.created,
        model=call.client_model,
        choices=choices,
        usage=usage.to_openai(),
    )
    return openai.encoder.encode(completion)


class ChunkWriter:
    """Encodes the `chat.completion.chunk` payloads of one stream: every chunk carries
    the same id, creation time and client model name, as OpenAI's do."""

    __slots__ = ("_created", "_id", "_model")

    def __init__(self, call: Call) -> None:
        self._id = completion_id(call)
        self._created = call.created
        self._model = call.client_model

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
            model=self._model,
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


def unreadable(target: Target, what: str) -> UpstreamUnavailable:
    """The upstream answered with something that is not `what` (not worth retrying:
    the same upstream would answer the same way)."""
    return UpstreamUnavailable(
        f"provider '{target.provider}' returned {what}",
        provider=target.provider,
        retryable=False,
    )
