"""Responses API in, OpenAI's own `/v1/responses` out: the same-API passthrough.

The client's body goes on as it came, fields the gateway does not model included, with
two changes: the upstream model name, and, when the gateway continues a conversation it
stored (`previous_response_id`), the conversation itself as `input` in place of the id
(the upstream never saw that id: the gateway's store is the one that knows it, which is
what lets a conversation move between providers). The answer comes back as OpenAI sent
it, model name rewritten; usage is read from the Response (`response.completed` when
streamed), and the final Response is kept for the gateway's store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.errors import UpstreamError, UpstreamUnavailable
from gateway.providers.base import Call, Target, Translated, UpstreamRequest
from gateway.providers.openai_compatible import openai_style_error
from gateway.providers.openai_out import unreadable
from gateway.providers.sse import SSEEvent
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_RESPONSES
from gateway.wire.served_model import served_model

# events that carry the whole Response object
_LIFECYCLE = frozenset(
    {
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def usage_from_responses(usage: Mapping[str, Any] | None) -> Usage | None:
    if not usage:
        return None
    prompt = int(usage.get("input_tokens") or 0)
    details = usage.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    output_details = usage.get("output_tokens_details") or {}
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=min(cached, prompt),
        output_tokens=int(usage.get("output_tokens") or 0),
        reasoning_tokens=int(output_details.get("reasoning_tokens") or 0),
    )


def passthrough_body(native: Mapping[str, Any], upstream_model: str) -> dict[str, Any]:
    """The body sent upstream. A `previous_response_id` is the gateway's (its conversation
    stage has already put the stored conversation into `input`), never the upstream's."""
    body = dict(native)
    body["model"] = upstream_model
    body.pop("previous_response_id", None)
    return body


def build_request(body: Mapping[str, Any], target: Target, request_id: str) -> UpstreamRequest:
    headers = {"content-type": "application/json", "x-request-id": request_id}
    headers.update(target.settings.headers)
    if target.settings.api_key is not None:
        headers["authorization"] = "Bearer " + target.settings.api_key.get_secret_value()
    return UpstreamRequest(
        url=target.base_url.rstrip("/") + "/responses",
        body=msgspec.json.encode(body),
        headers=headers,
        stream=bool(body.get("stream")),
    )


def parse_response(body: bytes, target: Target) -> tuple[dict[str, Any], Usage]:
    try:
        response = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise unreadable(target, "a body that is not JSON") from None
    if not isinstance(response, dict) or response.get("object") != "response":
        raise unreadable(target, "JSON that is not a Response object")
    response["model"] = served_model(response.get("model"), target.upstream_model)
    return response, usage_from_responses(response.get("usage")) or Usage()


def map_error(
    status: int, body: bytes, headers: Mapping[str, str], target: Target
) -> UpstreamError:
    return openai_style_error(status, body, headers, target.provider)


class OpenAIResponsesPassthrough:
    """The Translation for Responses in, OpenAI's /v1/responses out."""

    api = OPENAI_RESPONSES

    def build_request(self, call: Call, target: Target) -> UpstreamRequest:
        body = passthrough_body(call.native or {}, target.upstream_model)
        return build_request(body, target, call.request_id)

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated:
        response, usage = parse_response(body, target)
        return Translated(msgspec.json.encode(response), usage, api=OPENAI_RESPONSES)

    def stream(self, call: Call, target: Target) -> ResponsesPassthroughStream:
        return ResponsesPassthroughStream(target.upstream_model)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        return map_error(status, body, headers, target)


class ResponsesPassthroughStream:
    """Upstream Responses SSE events in, their payloads out (the codec frames them
    again, `event:` from each payload's `type`; a Response object that rides along
    names the served model, gateway.wire.served_model); the usage and the final
    Response are kept from the last lifecycle event."""

    __slots__ = ("_deployment_model", "response", "usage")

    # a Responses stream's deltas are not one token each: no chunk-count estimate
    content_chunks: int | None = None
    unreported_text: str | None = None

    def __init__(self, deployment_model: str) -> None:
        self._deployment_model = deployment_model
        self.usage: Usage | None = None
        self.response: dict[str, Any] | None = None

    def feed(self, event: SSEEvent) -> list[bytes]:
        data = event.data
        if not data or data == b"[DONE]":
            return []
        try:
            payload = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raise UpstreamUnavailable(
                "the upstream stream sent an event that is not JSON", provider="", retryable=False
            ) from None
        kind = payload.get("type") if isinstance(payload, dict) else None
        if not isinstance(kind, str):
            raise UpstreamUnavailable(
                "the upstream stream sent an event without a type", provider="", retryable=False
            )
        if kind in _LIFECYCLE and isinstance(payload.get("response"), dict):
            response = payload["response"]
            response["model"] = served_model(response.get("model"), self._deployment_model)
            if kind in _FINAL:
                self.response = response
                self.usage = usage_from_responses(response.get("usage")) or self.usage
            data = msgspec.json.encode(payload)
        return [data]

    def finish(self) -> list[bytes]:
        return []
