"""OpenAI-compatible upstreams: OpenAI, DeepSeek, SGLang, vLLM.

The client's body is forwarded as it came, fields we do not model included (SGLang and
vLLM extras such as `top_k`, `min_p`, `regex`), with two changes: the upstream model
name, and `stream_options.include_usage` always on for streams so every request can be
metered. Usage is read in each provider's dialect: OpenAI's `prompt_tokens_details.
cached_tokens` and `completion_tokens_details.reasoning_tokens`, DeepSeek's
`prompt_cache_hit_tokens`, llama.cpp's `timings.cache_n`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.errors import (
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamUnavailable,
)
from gateway.providers.base import Call, Target, Translated, UpstreamRequest
from gateway.providers.builtin_tools import plan_builtin_tools
from gateway.providers.openai_out import UNREADABLE, malformed_usage, token_count
from gateway.providers.retry_after import retry_after_seconds
from gateway.providers.sse import SSEEvent
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_CHAT
from gateway.wire.served_model import served_model

_json_decode = msgspec.json.decode
_OPEN_BRACE, _CLOSE_BRACE, _QUOTE, _LF, _SPACE = ord("{"), ord("}"), ord('"'), ord("\n"), 32
_json_encode = msgspec.json.encode


def usage_from_openai(usage: object, provider: str = "") -> Usage | None:
    """The usage an OpenAI-style answer reports, checked: a malformed one (a count that
    is not a non-negative integer, a `usage` that is not an object) is a 502 naming the
    provider, never a 500."""
    if not usage:
        return None
    if not isinstance(usage, dict):
        raise malformed_usage(provider, "usage is not an object")
    prompt = token_count(usage.get("prompt_tokens"), "prompt_tokens", provider)
    completion = token_count(usage.get("completion_tokens"), "completion_tokens", provider)
    details = _object(usage.get("prompt_tokens_details"), "prompt_tokens_details", provider)
    where = "prompt_tokens_details.cached_tokens"
    cached = token_count(details.get("cached_tokens"), where, provider)
    if not cached:
        hit = usage.get("prompt_cache_hit_tokens")
        cached = token_count(hit, "prompt_cache_hit_tokens", provider)
    completion_details = _object(
        usage.get("completion_tokens_details"), "completion_tokens_details", provider
    )
    where = "completion_tokens_details.reasoning_tokens"
    reasoning = token_count(completion_details.get("reasoning_tokens"), where, provider)
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=min(cached, prompt),
        output_tokens=completion,
        reasoning_tokens=reasoning,
    )


def _object(value: object, field: str, provider: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise malformed_usage(provider, f"{field} is not an object")
    return value


def cached_tokens_from_timings(payload: dict[str, Any]) -> dict[str, Any]:
    """llama-server counts the prompt tokens it reused from a slot's KV cache in
    `timings.cache_n`, beside `usage`; servers before mid-2025 put the count only there.
    Returns `payload` with that count as `usage.prompt_tokens_details.cached_tokens` where
    usage lacks one (so the client and the meter both see it), else `payload` itself."""
    usage = payload.get("usage")
    timings = payload.get("timings")
    if not isinstance(usage, dict) or not isinstance(timings, dict):
        return payload
    cache_n = timings.get("cache_n")
    details = usage.get("prompt_tokens_details")
    if not isinstance(cache_n, int) or (isinstance(details, dict) and "cached_tokens" in details):
        return payload
    filled = {**(details if isinstance(details, dict) else {}), "cached_tokens": cache_n}
    return {**payload, "usage": {**usage, "prompt_tokens_details": filled}}


class OpenAICompatibleStream:
    """Passes chunks through as the upstream sent them (`model` stays the served model,
    as the upstream named it); holds back the usage-only chunk, which `finish` returns so
    the dispatcher can drop it or add the cost to it."""

    __slots__ = ("_provider", "_usage_chunk", "content_chunks", "usage")

    # the content chunks are the estimate of an abandoned stream's output
    unreported_text: str | None = None

    def __init__(self, provider: str = "") -> None:
        self.usage: Usage | None = None
        self._provider = provider
        self._usage_chunk: bytes | None = None
        # one token per content chunk is how these servers stream; it is the output
        # estimate for a stream abandoned before its usage arrived
        self.content_chunks = 0

    def feed(self, event: SSEEvent) -> list[bytes]:
        data = event.data
        if data == b"[DONE]" or not data:
            return []
        # find, not `in` (see SSEParser.whole_data_events): a stream's every event
        if data.find(b'"error"', 0, 32) >= 0:
            raise _stream_error(data, self._provider)
        # a chunk goes on to the client as it came: the one check every chunk gets is
        # that it is framed as a JSON object; a chunk with usage is decoded and checked
        if not (data.startswith(b"{") and data.rstrip().endswith(b"}")):
            raise self._malformed("a stream chunk that is not a JSON object")
        if data.find(b'"usage"') >= 0:
            try:
                chunk = _json_decode(data)
            except UNREADABLE:
                raise self._malformed("a stream chunk that is not valid JSON") from None
            if not isinstance(chunk, dict):
                raise self._malformed("a stream chunk that is not a JSON object")
            if data.find(b'"timings"') >= 0:
                filled = cached_tokens_from_timings(chunk)
                if filled is not chunk:
                    chunk, data = filled, _json_encode(filled)
            usage = usage_from_openai(chunk.get("usage"), self._provider)
            if usage is not None:
                self.usage = usage
                if not chunk.get("choices"):
                    self._usage_chunk = data
                    return []
        # the compact form first: what nearly every chunk of these servers looks like
        at = data.find(b'"content":"')
        if (data[at + 11 : at + 12] != b'"') if at >= 0 else _has_content(data):
            self.content_chunks += 1
        return [data]

    def relay(self, frames: bytes, events: int) -> bool:
        """Whether `frames`, `events` whole `data: ` events as the upstream sent them, go
        to the client unchanged: every event a JSON object, none with usage, an error or
        the end marker (those go event by event through `feed`; a `"usage":null` is no
        usage). Their content chunks are
        counted as `feed` counts them.

        Scans of the whole read, not a parse per event: a stream's chunks cost the
        gateway what relaying them costs, and only the usage chunk is read."""
        if frames.find(b'"error"') >= 0:  # (not `in`: see SSEParser.whole_data_events)
            return False
        # OpenAI sends `"usage":null` in every chunk of a stream that asked for usage
        usages = frames.count(b'"usage"')
        if usages and usages != frames.count(b'"usage":null') + frames.count(b'"usage": null'):
            return False
        if events == 1:
            # (bytes read by index: the frames hold at least `data: ` and a blank line)
            if frames[6] != _OPEN_BRACE or frames[-3] != _CLOSE_BRACE:
                return False
            at = frames.find(b'"content":"')
            if (frames[at + 11 : at + 12] != b'"') if at >= 0 else _has_content(frames):
                self.content_chunks += 1
            return True
        if (
            frames[6:7] != b"{"
            or frames.count(b"\n\ndata: {") != events - 1
            or frames.count(b"}\n\n") != events
        ):
            return False
        for frame in frames.split(b"\n\n")[:-1]:
            at = frame.find(b'"content":"')
            if (frame[at + 11 : at + 12] != b'"') if at >= 0 else _has_content(frame):
                self.content_chunks += 1
        return True

    def relay_one(self, read: bytes, start: int, stop: int) -> int:
        """`relay` for `read[start:stop]`, one event as the upstream framed it in a read of
        its own (a whole chunk): -1 unless it goes to the client unchanged (one `data: `
        line holding a JSON object, no usage, error or end marker); else the content
        chunks `feed` would have counted for it (1 or 0), which the caller adds to
        `content_chunks` once it is written. Scans within the read, not a copy cut out
        of it."""
        if (
            not read.startswith(b"data: {", start)
            or read[stop - 1] != _LF
            or read[stop - 2] != _LF
            or read[stop - 3] != _CLOSE_BRACE
            or read.find(b"\n", start, stop - 2) >= 0
            or read.find(b"\r", start, stop) >= 0
            or read.find(b'"error"', start, stop) >= 0
        ):
            return -1
        usages = read.count(b'"usage"', start, stop)
        if usages and usages != read.count(b'"usage":null', start, stop) + read.count(
            b'"usage": null', start, stop
        ):
            return -1
        # `"content":"x` or `"content": "x` in one scan (a content delta: the role
        # chunk's is empty, a tool call's null)
        at = read.find(b'"content":', start, stop)
        if at < 0:
            return 1 if _has_content(read, start, stop) else 0
        at += 11 if read[at + 10] == _SPACE else 10
        return 1 if read[at] == _QUOTE and read[at + 1] != _QUOTE else 0

    def finish(self) -> list[bytes]:
        return [self._usage_chunk] if self._usage_chunk is not None else []

    def _malformed(self, what: str) -> UpstreamError:
        return UpstreamUnavailable(
            f"provider '{self._provider}' returned {what}", provider=self._provider, retryable=False
        )


def _has_content(data: bytes, start: int = 0, stop: int | None = None) -> bool:
    """A chunk with a non-empty content delta (the role chunk carries an empty one), or
    a legacy completion chunk with text (within `data[start:stop]`)."""
    for marker in (b'"content":"', b'"content": "', b'"text":"', b'"text": "'):
        at = data.find(marker, start, stop)
        if at >= 0:
            return data[at + len(marker) : at + len(marker) + 1] != b'"'
    return False


def _stream_error(data: bytes, provider: str) -> UpstreamError:
    """An error event in a stream already begun: its message, and the field (`param`) and
    `code` it names, kept for every ingress's streamed error shape as a whole-response
    error keeps them."""
    try:
        parsed = _json_decode(data)
    except UNREADABLE:
        parsed = {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        error = {}
    message = str(error.get("message") or "the upstream stream reported an error")
    param = error.get("param")
    code = error.get("code")
    return UpstreamUnavailable(
        message,
        provider=provider,
        retryable=False,
        param=param if isinstance(param, str) and param else None,
        code=code if isinstance(code, str) and code else None,
    )


class OpenAICompatible:
    """Chat completions by default; with another `api` and `path`, the same passthrough
    for another OpenAI API the upstream serves (legacy completions)."""

    def __init__(self, api: str = OPENAI_CHAT, path: str = "/chat/completions") -> None:
        self.api = api
        self._path = path

    def build_request(self, call: Call, target: Target) -> UpstreamRequest:
        source = call.native if call.api == self.api and call.native is not None else call.raw
        body = dict(source)
        body["model"] = target.upstream_model
        if call.api != self.api and not target.reasoning:
            # a reasoning setting the gateway derived from another API's request (Anthropic
            # `thinking`): a model that does not reason would refuse it
            body.pop("reasoning_effort", None)
        if call.request.stream:
            options = dict(body.get("stream_options") or {})
            options["include_usage"] = True
            body["stream_options"] = options
        headers = {"content-type": "application/json", "x-request-id": call.request_id}
        headers.update(target.settings.headers)
        if target.settings.api_key is not None:
            headers["authorization"] = "Bearer " + target.settings.api_key.get_secret_value()
        # chat completions has no built-in tools to map a client's to
        builtin = plan_builtin_tools(call, target)
        changes = builtin.changes if builtin is not None else []
        return UpstreamRequest(
            url=target.base_url.rstrip("/") + self._path,
            body=_json_encode(body),
            headers=headers,
            stream=call.request.stream,
            changes=changes,
        )

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated:
        try:
            completion = _json_decode(body)
        except UNREADABLE:
            raise UpstreamUnavailable(
                f"provider '{target.provider}' returned a body that is not JSON",
                provider=target.provider,
                retryable=False,
            ) from None
        if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
            raise UpstreamUnavailable(
                f"provider '{target.provider}' returned JSON that is not a completion",
                provider=target.provider,
                retryable=False,
            )
        filled = cached_tokens_from_timings(completion)
        usage = usage_from_openai(filled.get("usage"), target.provider)
        # the upstream's own body, unchanged when nothing was filled in: `model` is the
        # served model as the upstream named it (e.g. a dated snapshot), the same as in its
        # stream; the route the client asked for is in x-gateway-route
        if filled is completion and completion.get("model"):
            return Translated(body, usage or Usage())
        filled["model"] = served_model(filled.get("model"), target.upstream_model)
        return Translated(_json_encode(filled), usage or Usage())

    def stream(self, call: Call, target: Target) -> OpenAICompatibleStream:
        return OpenAICompatibleStream(target.provider)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        return openai_style_error(status, body, headers, target.provider)


def openai_style_error(
    status: int, body: bytes, headers: Mapping[str, str], provider: str
) -> UpstreamError:
    message = _error_message(body)
    retry_after = retry_after_seconds(headers)
    if status in (401, 403):
        # the provider's own message may quote part of our key: never pass it on
        return UpstreamMisconfigured(
            f"provider '{provider}' rejected the gateway's credentials ({status}); "
            f"check the api_key configured for '{provider}'",
            provider=provider,
            upstream_status=status,
        )
    if status in (408, 429):
        return UpstreamRejected(
            f"provider '{provider}': {message}",
            status=429 if status == 429 else 504,
            provider=provider,
            retryable=True,
            retry_after=retry_after,
        )
    if 400 <= status < 500:
        return UpstreamRejected(
            message, status=status, provider=provider, retryable=False, param=_error_param(body)
        )
    return UpstreamUnavailable(
        f"provider '{provider}' failed with {status}: {message}",
        provider=provider,
        upstream_status=status,
        retry_after=retry_after,
    )


def _error_param(body: bytes) -> str | None:
    """The request field an OpenAI-shaped refusal names (`error.param`), if any."""
    try:
        parsed = _json_decode(body)
    except UNREADABLE:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param if isinstance(param, str) and param else None


def _error_message(body: bytes) -> str:
    try:
        parsed = _json_decode(body)
    except UNREADABLE:
        text = body[:200].decode("utf-8", "replace").strip()
        return text or "no error message"
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if parsed.get("message"):
            return str(parsed["message"])
    return "no error message"
