"""The translation contract every provider module implements.

A translation is pure: it turns our OpenAI-shaped request into the provider's HTTP
request, and the provider's answer (a body, stream events, or an error) back into
OpenAI's shapes plus a normalized :class:`~gateway.usage.Usage`. The dispatcher does
the I/O; translations never see a socket or a clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gateway.errors import UpstreamError
from gateway.providers.sse import SSEEvent
from gateway.settings.server import ProviderSettings
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_CHAT
from gateway.wire.openai import ChatRequest


@dataclass(frozen=True, slots=True)
class Target:
    """Where one attempt goes: a provider, its upstream model name, and a base URL (a
    GPU pool's chosen replica, or the provider's own `base_url`)."""

    provider: str
    settings: ProviderSettings
    upstream_model: str
    base_url: str
    # used when the client gave no max_tokens and the API needs one (Anthropic)
    default_max_tokens: int = 4096
    # the model reasons (its catalog entry lists `reasoning`): only then do translations
    # send it reasoning settings they derived (thinking budgets, reasoning_effort)
    reasoning: bool = True


# not frozen: built once per request, and a frozen dataclass pays a setattr per field
@dataclass(slots=True)
class Call:
    """The facts about one request a translation needs beside the request itself."""

    request: ChatRequest
    # the client's JSON body, for fields the typed request does not model (pass-through)
    raw: Mapping[str, Any]
    # the model name the client asked for (answers name the served model instead:
    # gateway.wire.served_model)
    client_model: str
    request_id: str
    # seconds since the epoch, for the `created` field of translated responses
    created: int
    # the client's API and its own body, for an upstream that speaks that API natively
    api: str = OPENAI_CHAT
    native: Mapping[str, Any] | None = None
    # a field only an upstream speaking the client's own API can serve (see ingress.base)
    untranslatable: str | None = None
    # what a translation away from the client's API loses (see ingress.base.Decoded)
    translation_changes: tuple[str, ...] = ()
    # provider built-in tools the client asked for (e.g. "web_search"): a translation
    # maps each to its provider's own where one exists and notes the others dropped
    builtin_tools: tuple[str, ...] = ()


@dataclass(slots=True)
class UpstreamRequest:
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    stream: bool = False
    # what the translation left out or changed of the client's request (e.g.
    # "dropped:client_metadata"), for x-gateway-route
    changes: list[str] = field(default_factory=list)


class UpstreamResponse(Protocol):
    """What every HTTP client under the transport seam answers with."""

    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes: ...

    def iter_bytes(self) -> AsyncIterator[bytes]: ...

    async def close(self) -> None: ...


class ProviderClient(Protocol):
    """One HTTP client module's client (see providers/transport.py)."""

    async def send(self, request: UpstreamRequest) -> UpstreamResponse: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class Translated:
    """A complete answer and the usage it reports: an OpenAI chat.completion body, or
    the upstream's own body for a same-API passthrough (`api` says which)."""

    body: bytes
    usage: Usage
    api: str = OPENAI_CHAT


class StreamTranslation(Protocol):
    """Turns one upstream stream into OpenAI `chat.completion.chunk` payloads.

    `feed` takes each SSE event as it arrives and returns the JSON payloads to send to
    the client as `data: <payload>` lines (zero or more per event); it raises an
    UpstreamError when the stream reports an error. `finish` is called once at the end
    of the upstream stream and returns any last payloads (the final usage chunk).
    `usage` is the usage seen so far, kept even if the stream is abandoned.
    """

    usage: Usage | None

    @property
    def content_chunks(self) -> int | None:
        """Chunks with generated text in them, where the API streams a token per chunk:
        the output estimate for a stream abandoned before its usage arrived (None: the
        API gives no such estimate)."""
        ...

    @property
    def unreported_text(self) -> str | None:
        """The text streamed so far that `usage` does not count yet, for an API that
        reports its output tokens only at the end (Anthropic): an abandoned stream's
        output is counted from it offline. None once the final usage has arrived, or
        where the API's usage keeps up with its text."""
        ...

    def feed(self, event: SSEEvent) -> list[bytes]: ...

    def finish(self) -> list[bytes]: ...


class RelayableStream(Protocol):
    """A stream translation whose ordinary events go to a same-API client as the upstream
    framed them (an OpenAI-compatible passthrough): a read of such events is relayed
    as it came, and only the events that matter to the gateway (usage, errors, the end)
    go through `feed`."""

    def relay(self, frames: bytes, events: int) -> bool:
        """Whether `frames` (`events` whole single-line `data: ` events, as the upstream
        sent them) go to the client unchanged; True counts them as `feed` would have,
        False leaves them to `feed`."""
        ...

    def relay_one(self, read: bytes, start: int, stop: int) -> int:
        """`relay` for `read[start:stop]`, one event as the upstream sent it in a read of
        its own (the rest of `read` is its framing), scanned where it lies, and without
        counting: -1 when it is not relayed, else the content chunks to add to
        `content_chunks` once it is written."""
        ...

    content_chunks: int


class Translation(Protocol):
    """One provider API's translation (see providers/openai_compatible.py for the shape).

    `api` is the API its answers are in: "openai.chat" for every translation from the
    internal request, the client's own API for a same-API passthrough.
    """

    api: str

    def build_request(self, call: Call, target: Target) -> UpstreamRequest: ...

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated: ...

    def stream(self, call: Call, target: Target) -> StreamTranslation: ...

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError: ...


@runtime_checkable
class BatchedTranslation(Protocol):
    """A translation whose one request may take several upstream calls to the same
    deployment (embeddings inputs past the provider's batch size), answered as one."""

    def build_requests(self, call: Call, target: Target) -> list[UpstreamRequest]: ...

    def parse_responses(self, bodies: list[bytes], call: Call, target: Target) -> Translated: ...

    def in_common_form(self, upstream: UpstreamRequest) -> UpstreamRequest | None:
        """`upstream` asked in the form every upstream of this API takes (embeddings:
        floats, not base64); None when it is in that form already."""
        ...

    def refuses_form(self, status: int, body: bytes) -> bool:
        """Whether an error answer (`status`, `body`) says the upstream does not take
        the form it was asked in (which `in_common_form` would change)."""
        ...
