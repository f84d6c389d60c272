"""Same-API passthrough: an Anthropic Messages request from a client to an Anthropic
provider, forwarded as it came, and Anthropic's answer sent back as it came.

Nothing the client sent is re-encoded: system blocks, `cache_control` markers, thinking
blocks and their signatures, redacted thinking, documents, `metadata`, `top_k` and
fields the gateway has never heard of reach Anthropic byte for byte. What changes:

- the model name, spliced into the bytes where it appears once as a key (the whole
  body is re-encoded only when `"model"` also appears as a key deeper in it, e.g. in a
  tool's input); the answer keeps the served model as Anthropic named it
  (gateway.wire.served_model), as every answer does;
- thinking blocks without a signature are dropped (the gateway wrote them, translating
  another model's reasoning in an earlier turn; Anthropic refuses them), re-encoding
  the body only when there are some;
- the headers: the provider's key replaces the client's (never forwarded), the
  client's `anthropic-version` is kept (it fixes the answer's shape) and its
  `anthropic-beta` values pass, but for those the provider denies
  (`anthropic_betas_denied`, or not in `anthropic_betas` when that allow-list is set):
  those are dropped and named in x-gateway-route (`changed=dropped-beta:NAME`).

Usage (input, output, cache reads, 5-minute and 1-hour cache writes, thinking) is read
from the answer, the message's or the stream's `message_start` and `message_delta`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.errors import UpstreamError
from gateway.providers.anthropic import (
    ERROR_STATUS,
    AnthropicTranslation,
    error_from_anthropic,
    event_text,
    messages_url,
    usage_from_anthropic,
)
from gateway.providers.base import Call, Target, Translated, UpstreamRequest
from gateway.providers.openai_out import unreadable
from gateway.providers.sse import SSEEvent
from gateway.usage import Usage
from gateway.wire import anthropic as wire
from gateway.wire.apis import ANTHROPIC_MESSAGES
from gateway.wire.served_model import served_model

_MODEL_KEY = b'"model"'
_COLON = re.compile(rb"\s*:\s*")
_usage_fields = wire.ResponseUsage.__struct_fields__


def splice_model(body: bytes, old: str, new: str) -> bytes | None:
    """`body` with its one `"model": old` made `"model": new`, every other byte kept;
    None when `"model"` is a key more than once (which one is ours is then unknown)."""
    if old == new:
        return body
    if body.count(_MODEL_KEY) != 1:
        return None
    key = body.find(_MODEL_KEY) + len(_MODEL_KEY)
    colon = _COLON.match(body, key)
    value = msgspec.json.encode(old)
    if colon is None or not body.startswith(value, colon.end()):
        return None
    start = colon.end()
    return body[:start] + msgspec.json.encode(new) + body[start + len(value) :]


def replace_model(body: bytes, old: str, new: str) -> bytes:
    """A request's or message's JSON object with its top-level model set to `new`."""
    spliced = splice_model(body, old, new)
    if spliced is not None:
        return spliced
    decoded = msgspec.json.decode(body)
    decoded["model"] = new
    return msgspec.json.encode(decoded)


def _rename_start(data: bytes, old: str, new: str) -> bytes:
    """A `message_start` event with its message's model set to `new`."""
    spliced = splice_model(data, old, new)
    if spliced is not None:
        return spliced
    decoded = msgspec.json.decode(data)
    decoded["message"]["model"] = new
    return msgspec.json.encode(decoded)


def forward_headers(client_headers: Mapping[str, str], target: Target) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    headers.update(target.settings.headers)
    headers["anthropic-version"] = (
        client_headers.get("anthropic-version") or target.settings.anthropic_version
    )
    betas, _ = split_betas(client_headers.get("anthropic-beta", ""), target)
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    if target.settings.api_key is not None:
        headers["x-api-key"] = target.settings.api_key.get_secret_value()
    return headers


def split_betas(header: str, target: Target) -> tuple[list[str], list[str]]:
    """The client's betas as (forwarded, dropped by the provider's settings)."""
    if not header:
        return [], []  # most requests ask for none
    settings = target.settings
    allowed = None if settings.anthropic_betas is None else set(settings.anthropic_betas)
    denied = set(settings.anthropic_betas_denied)
    kept: list[str] = []
    dropped: list[str] = []
    for beta in (b.strip() for b in header.split(",")):
        if not beta:
            continue
        if beta in denied or (allowed is not None and beta not in allowed):
            dropped.append(beta)
        else:
            kept.append(beta)
    return kept, dropped


_UNSIGNED = (b'"signature":""', b'"signature": ""')


def _unsigned_thinking(block: object) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")
    )


def has_unsigned_thinking(native: Mapping[str, Any]) -> bool:
    """Whether a decoded Messages body holds a thinking block without a signature: a body
    that holds none is what `without_unsigned_thinking` leaves as it came, so its bytes
    need no search (walking its messages costs less than reading every byte)."""
    for message in native.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(_unsigned_thinking(block) for block in content):
            return True
    return False


def without_unsigned_thinking(body: bytes) -> bytes:
    """`body` without thinking blocks that carry no signature: those are the gateway's
    own translations of another model's reasoning (an earlier turn served elsewhere),
    which Anthropic would refuse. Re-encoded only when there are some."""
    # `find`, not `in`: bytes' `in` first tries its operand as an integer, and building
    # that TypeError costs more than a short body's search
    if all(body.find(marker) < 0 for marker in _UNSIGNED):
        return body
    decoded = msgspec.json.decode(body)
    changed = False
    for message in decoded.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        kept = [block for block in content if not _unsigned_thinking(block)]
        if len(kept) != len(content):
            message["content"] = kept or [{"type": "text", "text": "(no text)"}]
            changed = True
    return msgspec.json.encode(decoded) if changed else body


def build_request(
    native_body: bytes,
    client_headers: Mapping[str, str],
    client_model: str,
    target: Target,
    *,
    stream: bool,
    unsigned_thinking: bool = True,
) -> UpstreamRequest:
    """The request Anthropic gets for a client's Messages body; `unsigned_thinking`
    False when the body is known to hold no unsigned thinking block (has_unsigned_thinking),
    so it is not searched for one."""
    _, dropped = split_betas(client_headers.get("anthropic-beta", ""), target)
    body = without_unsigned_thinking(native_body) if unsigned_thinking else native_body
    return UpstreamRequest(
        url=messages_url(target.base_url),
        body=replace_model(body, client_model, target.upstream_model),
        headers=forward_headers(client_headers, target),
        stream=stream,
        changes=[f"dropped-beta:{beta}" for beta in dropped] if dropped else [],
    )


def read_message(body: bytes, target: Target) -> tuple[bytes, Usage]:
    """Anthropic's message as it came (named by the served model), and its usage."""
    try:
        message = wire.message_decoder.decode(body)
    except msgspec.DecodeError:
        raise unreadable(target, "a body that is not an Anthropic message") from None
    model = served_model(message.model, target.upstream_model)
    if model != message.model:
        body = replace_model(body, message.model, model)
    return body, usage_from_anthropic(message.usage)


def _event(data: bytes) -> wire.StreamEvent:
    try:
        return wire.event_decoder.decode(data)
    except msgspec.DecodeError:
        return wire.StreamEvent(type="")


def count_tokens_request(
    native_body: bytes, client_headers: Mapping[str, str], client_model: str, target: Target
) -> UpstreamRequest:
    """The client's `/v1/messages/count_tokens` body, for the deployment it would be
    served by: forwarded as a Messages request is (its model, the provider's key and
    the allowed betas), to the same API's count endpoint."""
    request = build_request(native_body, client_headers, client_model, target, stream=False)
    request.url += "/count_tokens"
    return request


class _TokenCount(msgspec.Struct):
    input_tokens: int


def read_token_count(body: bytes) -> int | None:
    """The count in Anthropic's count_tokens answer, None for anything else."""
    try:
        count = msgspec.json.decode(body, type=_TokenCount).input_tokens
    except msgspec.DecodeError:
        return None
    return count if count >= 0 else None


class _EventHead(msgspec.Struct):
    type: str = ""
    message: wire.Message | None = None
    usage: wire.ResponseUsage | None = None
    error: wire.ErrorObject | None = None


_head_decoder = msgspec.json.Decoder(_EventHead)


class NativeStream:
    """Anthropic's events in, the same event payloads out (the ingress codec frames
    them again, event name = payload `type`), named by the served model as Anthropic
    named it. An `error` event raises, so the dispatcher ends the stream as for any
    upstream failure."""

    # Anthropic's events carry no per-token count: an abandoned stream is billed its
    # message_start usage with the output counted from the text streamed
    content_chunks: int | None = None

    def __init__(self, target: Target) -> None:
        self.usage: Usage | None = None
        self._target = target
        self._raw = wire.ResponseUsage()
        # content events since the last usage, kept as they came: decoded only if the
        # stream is abandoned before its closing message_delta
        self._unreported: list[bytes] = []

    @property
    def unreported_text(self) -> str | None:
        if not self._unreported:
            return None
        return "".join(event_text(_event(data)) for data in self._unreported) or None

    def feed(self, event: SSEEvent) -> list[bytes]:
        data = event.data
        if not data:
            return []
        kind = event.event
        if kind in ("content_block_delta", "content_block_start"):
            self._unreported.append(data)
            return [data]
        if kind in ("message_start", "message_delta", "error", None):
            try:
                head = _head_decoder.decode(data)
            except msgspec.DecodeError:
                raise unreadable(self._target, "a malformed stream event") from None
            if head.type == "error":
                error = head.error or wire.ErrorObject()
                status = ERROR_STATUS.get(error.type, 500)
                raise error_from_anthropic(status, error.type, error.message, {}, self._target)
            if head.type == "message_start" and head.message is not None:
                self._merge(head.message.usage)
                model = served_model(head.message.model, self._target.upstream_model)
                if model != head.message.model:
                    data = _rename_start(data, head.message.model, model)
            elif head.type == "message_delta":
                if head.usage is not None:
                    self._unreported.clear()
                self._merge(head.usage)
        return [data]

    def finish(self) -> list[bytes]:
        return []

    def _merge(self, usage: wire.ResponseUsage | None) -> None:
        if usage is None:
            return
        for field in _usage_fields:
            value = getattr(usage, field)
            if value is not None:
                setattr(self._raw, field, value)
        self.usage = usage_from_anthropic(self._raw)


def map_error(
    status: int, body: bytes, headers: Mapping[str, str], target: Target
) -> UpstreamError:
    """Anthropic's error, mapped as for translated requests (its type kept as `code`)."""
    return AnthropicTranslation().map_error(status, body, headers, target)


# -- the translation ----------------------------------------------------------------


class AnthropicNativeTranslation:
    """The (Anthropic Messages in, Anthropic provider) pair of the registry."""

    api = ANTHROPIC_MESSAGES

    def build_request(self, call: Call, target: Target) -> UpstreamRequest:
        native = call.native
        if native is None:  # the registry pairs this translation with Messages clients only
            raise ValueError("the Anthropic passthrough needs the client's Messages body")
        raw = getattr(native, "raw", None)
        body = raw if isinstance(raw, bytes) else msgspec.json.encode(dict(native))
        headers: Mapping[str, str] = getattr(native, "headers", {})
        return build_request(
            body,
            headers,
            call.client_model,
            target,
            stream=call.request.stream,
            unsigned_thinking=has_unsigned_thinking(native),
        )

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated:
        answer, usage = read_message(body, target)
        return Translated(answer, usage, api=ANTHROPIC_MESSAGES)

    def stream(self, call: Call, target: Target) -> NativeStream:
        return NativeStream(target)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        return map_error(status, body, headers, target)
