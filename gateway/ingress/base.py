"""The codec contract every client-facing API implements.

The internal request is OpenAI chat completions: a typed
:class:`~gateway.wire.openai.ChatRequest` (what routing, limits and metering read) and
its JSON object (what provider translations send on, fields we do not model included).
The internal answer is an OpenAI `chat.completion` body, or `chat.completion.chunk`
payloads for a stream. A codec turns its API into that and back:

    wire request --decode--> Decoded --(plan, admit, dispatch)--> chat answer
    chat answer --encode_response / stream_encoder--> wire answer

When the client's API is the one the upstream speaks (see `providers/registry.py`), the
answer arrives already in the client's API and the codec only frames it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from gateway.errors import GatewayError
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_CHAT, OPENAI_COMPLETIONS
from gateway.wire.openai import ChatRequest

__all__ = ["OPENAI_CHAT", "OPENAI_COMPLETIONS"]


# not frozen: built once per request, and a frozen dataclass pays a setattr per field
@dataclass(slots=True)
class Decoded:
    request: ChatRequest
    # the request as an OpenAI chat completions JSON object
    chat_body: dict[str, Any]
    # the client's own JSON object, forwarded as it came when the upstream speaks its API
    native_body: dict[str, Any]
    # a field the client sent that only an upstream speaking the client's own API can
    # serve (e.g. a completions prompt array): such a request is refused by any other
    untranslatable: str | None = None
    # what a translation to another API leaves out (e.g. "dropped:context_management"),
    # said in x-gateway-route when the request is translated
    translation_changes: tuple[str, ...] = ()
    # provider built-in tools asked for (Responses `web_search`): mapped to the
    # upstream's own where it has one, else dropped or refused (providers decide)
    builtin_tools: tuple[str, ...] = ()


# not frozen: built once per request, and a frozen dataclass pays a setattr per field
@dataclass(slots=True)
class EncodeContext:
    """What an encoder needs beside the answer itself."""

    request_id: str
    # seconds since the epoch, for `created` fields
    created: int
    # the served model's deployment id: the answer's `model` where the upstream's answer
    # names none (gateway.wire.served_model; an answer that names one keeps that name)
    model: str
    # the client asked for the usage chunk at the end of a stream
    wants_usage: bool
    # the client's own request object (as resumed: a stored conversation inlined), for
    # APIs whose answers echo the request's settings (Responses)
    native: Mapping[str, Any] | None = None


class StreamEncoder(Protocol):
    """Turns one stream's chat chunks into SSE frames of the client's API.

    `feed` takes the payloads of one network read (chat chunks, or for a same-API stream
    the upstream's own event payloads) and returns the SSE bytes to send (b"" for none:
    one call per read, not per chunk, keeps the hot path lean); `finish` returns the closing frames,
    given the stream's final payloads held back by the translation, its usage and cost;
    `error` the frames that end a stream an upstream failure cut short.
    """

    def feed(self, payloads: list[bytes]) -> bytes: ...

    def finish(
        self, held: list[bytes], usage: Usage | None, cost: Decimal | None
    ) -> list[bytes]: ...

    def error(self, error: GatewayError) -> list[bytes]: ...


@runtime_checkable
class VerbatimEncoder(Protocol):
    """A stream encoder that, when `verbatim`, frames a same-API payload as `data:
    <payload>` and nothing else: the frames of a relayed read are what it would have
    written, and it is told of them (`relayed`) instead of fed their payloads."""

    verbatim: bool

    def relayed(self, frames: bytes) -> None: ...


class IngressCodec(Protocol):
    # one of the API names above
    api: str

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        """The gateway key the client presented, None when it sent none."""
        ...

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded:
        """The client's body (and request headers, lower-case names: an API may carry
        request options in them, as Anthropic's `anthropic-beta` does) as the internal
        request; InvalidRequest naming the field."""
        ...

    def encode_response(self, completion: bytes, native: bool, ctx: EncodeContext) -> bytes:
        """The answer in the client's API: `completion` is a chat.completion body, or the
        upstream's own body when `native` (same API in and out)."""
        ...

    def stream_encoder(self, native: bool, ctx: EncodeContext) -> StreamEncoder: ...

    def error_body(self, error: GatewayError) -> bytes: ...
