"""A fake Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`)
on 127.0.0.1.

It rejects what the real API rejects, with Anthropic's error bodies: a missing or wrong
key (401; `x-api-key`, or the bearer token the official SDK 2.x sends), a missing
`anthropic-version`, a body that does not validate against the official SDK's
`MessageCreateParams` (missing `max_tokens`, bad blocks), a `system` role inside
`messages`, turns that do not alternate, empty text blocks, tool results without their
tool use (and the reverse), `temperature` with `top_p`. Bodies and stream events are
built from the `anthropic` SDK's types.

    with AnthropicFake() as fake:
        fake.enqueue_message(text_message("hi"))       # JSON, or events when streaming
        fake.enqueue_events([...])                      # a raw event stream
        fake.enqueue_error(529, "overloaded_error", "Overloaded")
        fake.enqueue_count(1234)                        # the next count_tokens answer
        fake.requests[-1].json, fake.requests[-1].headers
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pydantic
from anthropic import types as at
from anthropic.types import message_count_tokens_params, message_create_params
from anthropic.types.raw_message_delta_event import Delta as MessageDelta

from tests.fakes import FakeServer, Received, Reply, pieces, sse

DEFAULT_KEY = "sk-ant-fake-key"
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


# -- building answers from SDK types -------------------------------------------------


def text_message(
    text: str,
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int | None = None,
    cache_write: int | None = None,
    model: str = "claude-sonnet-4-5",
) -> at.Message:
    return make_message(
        [at.TextBlock(type="text", text=text)],
        stop_reason=stop_reason,
        usage=at.Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_input_tokens=cache_read,
            cache_creation_input_tokens=cache_write,
        ),
        model=model,
    )


def thinking_message(
    thinking: str,
    signature: str,
    text: str,
    *,
    redacted: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 30,
) -> at.Message:
    """An extended-thinking answer: a signed thinking block (and a redacted one), then
    text."""
    blocks: list[at.ContentBlock] = [
        at.ThinkingBlock(type="thinking", thinking=thinking, signature=signature)
    ]
    if redacted is not None:
        blocks.append(at.RedactedThinkingBlock(type="redacted_thinking", data=redacted))
    blocks.append(at.TextBlock(type="text", text=text))
    usage = at.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return make_message(blocks, stop_reason="end_turn", usage=usage)


def cached_usage(
    input_tokens: int, output_tokens: int, *, read: int, write_5m: int, write_1h: int
) -> at.Usage:
    """Usage with prompt-cache reads and writes split by lifetime, as Anthropic reports."""
    return at.Usage.model_validate(
        {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write_5m + write_1h,
            "cache_creation": {
                "ephemeral_5m_input_tokens": write_5m,
                "ephemeral_1h_input_tokens": write_1h,
            },
        }
    )


def tool_message(
    calls: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    text: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> at.Message:
    """A tool_use answer: (id, name, input) per call, after optional text."""
    blocks: list[at.ContentBlock] = []
    if text:
        blocks.append(at.TextBlock(type="text", text=text))
    blocks += [
        at.ToolUseBlock(type="tool_use", id=call_id, name=name, input=tool_input)
        for call_id, name, tool_input in calls
    ]
    usage = at.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return make_message(blocks, stop_reason="tool_use", usage=usage)


def make_message(
    blocks: Sequence[at.ContentBlock],
    *,
    stop_reason: str,
    usage: at.Usage,
    model: str = "claude-sonnet-4-5",
    message_id: str = "msg_01FakeFakeFake",
) -> at.Message:
    return at.Message.model_validate(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [b.model_dump(mode="json", exclude_none=True) for b in blocks],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage.model_dump(mode="json", exclude_none=True),
        }
    )


def message_events(
    message: at.Message,
    split: Callable[[str], list[str]] = lambda s: pieces(s, 8),
    *,
    pings: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """The stream Anthropic sends for `message`: text and tool JSON cut by `split`, a
    `ping` inserted before each event position in `pings`. Each event is an SDK
    `RawMessageStreamEvent` dumped to JSON (ping has no SDK type)."""
    usage = message.usage
    start_usage = at.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=1,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        cache_creation=usage.cache_creation,
    )
    start_message = message.model_copy(
        update={"content": [], "stop_reason": None, "usage": start_usage}
    )
    events: list[Any] = [at.RawMessageStartEvent(type="message_start", message=start_message)]
    for index, block in enumerate(message.content):
        events.extend(_block_events(index, block, split))
    events.append(
        at.RawMessageDeltaEvent(
            type="message_delta",
            delta=MessageDelta(
                stop_reason=message.stop_reason, stop_sequence=message.stop_sequence
            ),
            usage=at.MessageDeltaUsage(
                output_tokens=usage.output_tokens,
                input_tokens=usage.input_tokens,
                cache_read_input_tokens=usage.cache_read_input_tokens,
                cache_creation_input_tokens=usage.cache_creation_input_tokens,
            ),
        )
    )
    events.append(at.RawMessageStopEvent(type="message_stop"))
    dumped = [e.model_dump(mode="json", exclude_none=True) for e in events]
    for position in sorted(pings, reverse=True):
        dumped.insert(min(max(position, 1), len(dumped)), {"type": "ping"})
    return dumped


def _block_events(
    index: int, block: at.ContentBlock, split: Callable[[str], list[str]]
) -> list[Any]:
    events: list[Any] = []
    if isinstance(block, at.TextBlock):
        start: Any = at.TextBlock(type="text", text="")
        deltas: list[Any] = [at.TextDelta(type="text_delta", text=p) for p in split(block.text)]
    elif isinstance(block, at.ToolUseBlock):
        start = at.ToolUseBlock(type="tool_use", id=block.id, name=block.name, input={})
        text = json.dumps(block.input)
        deltas = [at.InputJSONDelta(type="input_json_delta", partial_json=p) for p in split(text)]
    elif isinstance(block, at.ThinkingBlock):
        start = at.ThinkingBlock(type="thinking", thinking="", signature="")
        deltas = [
            at.ThinkingDelta(type="thinking_delta", thinking=p) for p in split(block.thinking)
        ]
        deltas.append(at.SignatureDelta(type="signature_delta", signature=block.signature))
    elif isinstance(block, at.RedactedThinkingBlock):
        # redacted thinking arrives whole in its content_block_start
        start, deltas = block, []
    else:
        raise ValueError(f"no stream form for {block.type} blocks")
    events.append(
        at.RawContentBlockStartEvent(type="content_block_start", index=index, content_block=start)
    )
    events += [
        at.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=d)
        for d in deltas
        if not isinstance(d, (at.TextDelta, at.InputJSONDelta))
        or (d.text if isinstance(d, at.TextDelta) else d.partial_json)
    ]
    events.append(at.RawContentBlockStopEvent(type="content_block_stop", index=index))
    return events


def events_to_sse(events: Sequence[dict[str, Any]]) -> list[bytes]:
    return [sse(event["type"], event) for event in events]


def error_body(error_type: str, message: str) -> dict[str, Any]:
    from anthropic.types.shared import ErrorResponse

    body = ErrorResponse.model_validate(
        {"type": "error", "error": {"type": error_type, "message": message}}
    )
    dumped = body.model_dump(mode="json", exclude_none=True)
    dumped["request_id"] = "req_fake"
    return dumped


# -- validation, as the real API does it ---------------------------------------------


@lru_cache(maxsize=2)
def _params_adapter(stream: bool) -> pydantic.TypeAdapter[Any]:
    kind = (
        message_create_params.MessageCreateParamsStreaming
        if stream
        else message_create_params.MessageCreateParamsNonStreaming
    )
    return pydantic.TypeAdapter(kind)


@lru_cache(maxsize=1)
def _count_adapter() -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(message_count_tokens_params.MessageCountTokensParams)


def _walk(value: Any, path: str) -> None:
    """Pydantic validates Iterable fields lazily: walking them validates them, and a
    failure deep inside is reported with its full path, as Anthropic does."""
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        index = 0
        iterator = iter(value)
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                return
            except pydantic.ValidationError as error:
                raise _rejection(error, f"{path}.{index}") from None
            _walk(item, f"{path}.{index}")
            index += 1


def _rejection(error: pydantic.ValidationError, prefix: str) -> Rejection:
    first = error.errors()[0]
    # drop pydantic's union-member names (e.g. "TextBlockParam") from the location
    parts = [str(p) for p in first["loc"] if not (isinstance(p, str) and p[:1].isupper())]
    where = ".".join([prefix, *parts] if prefix else parts)
    return Rejection(400, "invalid_request_error", f"{where}: {first['msg']}")


class Rejection(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


def check_request(request: Received, api_key: str) -> dict[str, Any]:
    """The body, or a Rejection with the error the real API would send."""
    counting = request.path == COUNT_TOKENS_PATH
    if request.method != "POST" or request.path not in ("/v1/messages", COUNT_TOKENS_PATH):
        raise Rejection(404, "not_found_error", f"Not found: {request.method} {request.path}")
    # the official SDK (2.x) sends the key as a bearer token; the API takes either
    bearer = request.headers.get("authorization", "")
    key = request.headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()
    if not key:
        raise Rejection(401, "authentication_error", "x-api-key header is required")
    if key != api_key:
        raise Rejection(401, "authentication_error", "invalid x-api-key")
    if not request.headers.get("anthropic-version"):
        raise Rejection(400, "invalid_request_error", "anthropic-version: header is required")
    try:
        body = json.loads(request.body)
    except ValueError:
        raise Rejection(400, "invalid_request_error", "Request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise Rejection(400, "invalid_request_error", "Request body must be a JSON object")
    _check_fields(body, request.headers.get("anthropic-beta", ""), counting)
    for name in ("model", "messages") if counting else ("model", "max_tokens", "messages"):
        if name not in body:
            raise Rejection(400, "invalid_request_error", f"{name}: Field required")
    for i, message in enumerate(body["messages"]):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            raise Rejection(
                400,
                "invalid_request_error",
                'messages: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.',
            )
        if role not in ("user", "assistant"):
            raise Rejection(
                400,
                "invalid_request_error",
                f"messages.{i}.role: Input should be 'user' or 'assistant'",
            )
    try:
        adapter = _count_adapter() if counting else _params_adapter(bool(body.get("stream")))
        validated = adapter.validate_python(body)
    except pydantic.ValidationError as error:
        raise _rejection(error, "") from None
    _walk(validated, "")
    if "temperature" in body and "top_p" in body:
        raise Rejection(
            400,
            "invalid_request_error",
            "`temperature` and `top_p` cannot both be specified for this model. "
            "Please use only one.",
        )
    _check_turns(body["messages"])
    return body


# fields Anthropic takes only with the beta that enables them (the SDK's beta types)
BETA_FIELDS = {
    "context_management": "context-management-2025-06-27",
    "mcp_servers": "mcp-client-2025-04-04",
}


@lru_cache(maxsize=2)
def _known_fields(counting: bool) -> frozenset[str]:
    kind = (
        message_count_tokens_params.MessageCountTokensParams
        if counting
        else message_create_params.MessageCreateParamsBase
    )
    # sampling settings Claude Sonnet 4.5 still takes (the 2.x SDK's types dropped them)
    sampling = () if counting else ("temperature", "top_p", "top_k")
    return frozenset({*kind.__required_keys__, *kind.__optional_keys__, "stream", *sampling})


def _check_fields(body: dict[str, Any], beta_header: str, counting: bool) -> None:
    """A field the API does not know, or one whose beta the request did not enable, is
    refused as Anthropic refuses it."""
    betas = {b.strip() for b in beta_header.split(",") if b.strip()}
    for name in body:
        if name in _known_fields(counting):
            continue
        if BETA_FIELDS.get(name) in betas:
            continue
        raise Rejection(400, "invalid_request_error", f"{name}: Extra inputs are not permitted")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _check_turns(messages: list[dict[str, Any]]) -> None:
    invalid = "invalid_request_error"
    for earlier, later in itertools.pairwise(messages):
        if earlier["role"] == later["role"]:
            raise Rejection(
                400,
                invalid,
                'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{later["role"]}" roles in a row',
            )
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        for j, block in enumerate(blocks):
            if block["type"] == "text" and not block["text"]:
                raise Rejection(
                    400,
                    invalid,
                    f"messages.{i}.content.{j}.text: text content blocks must be non-empty",
                )
            if block["type"] == "text" and not block["text"].strip():
                raise Rejection(
                    400,
                    invalid,
                    f"messages.{i}.content.{j}.text: text content blocks must contain "
                    "non-whitespace text",
                )
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if uses and i + 1 < len(messages):
            answered = {
                b["tool_use_id"] for b in _blocks(messages[i + 1]) if b["type"] == "tool_result"
            }
            missing = [u for u in uses if u not in answered]
            if missing:
                raise Rejection(
                    400,
                    invalid,
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message.",
                )
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if results:
            previous = _blocks(messages[i - 1]) if i > 0 else []
            known = {b["id"] for b in previous if b["type"] == "tool_use"}
            for j, result in enumerate(results):
                if result not in known:
                    raise Rejection(
                        400,
                        invalid,
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {result}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message.",
                    )


# -- the server ----------------------------------------------------------------------


@dataclass
class _Scripted:
    message: at.Message | None = None
    events: Sequence[dict[str, Any]] | None = None
    error: tuple[int, str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # the answer to a count_tokens request
    count: int | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    # every event in one write, so the reader gets them in one network read
    one_write: bool = False


class AnthropicFake(FakeServer):
    def __init__(self, api_key: str = DEFAULT_KEY) -> None:
        super().__init__()
        self.api_key = api_key

    def __enter__(self) -> AnthropicFake:
        self.start()
        return self

    def enqueue_message(
        self, message: at.Message, *, delay: float = 0.0, chunk_delay: float = 0.0
    ) -> None:
        """Answer the next request with `message` (as events if it asks to stream)."""
        self.enqueue(_Scripted(message=message, delay=delay, chunk_delay=chunk_delay))

    def enqueue_events(
        self,
        events: Sequence[dict[str, Any]],
        *,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
        one_write: bool = False,
    ) -> None:
        """Answer the next request with exactly these stream events (`one_write`: all in
        a single write, as a fast upstream's events arrive in one network read)."""
        self.enqueue(
            _Scripted(events=events, delay=delay, chunk_delay=chunk_delay, one_write=one_write)
        )

    def enqueue_count(self, input_tokens: int, *, delay: float = 0.0) -> None:
        """Answer the next count_tokens request with this count."""
        self.enqueue(_Scripted(count=input_tokens, delay=delay))

    def enqueue_error(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.enqueue(
            _Scripted(error=(status, error_type, message), headers=headers or {}, delay=delay)
        )

    def respond(self, request: Received) -> Reply:
        try:
            body = check_request(request, self.api_key)
        except Rejection as rejection:
            return Reply(rejection.status, error_body(rejection.error_type, rejection.message))
        counting = request.path == COUNT_TOKENS_PATH
        scripted = self.next_scripted() or (
            _Scripted(count=echo_count(body)) if counting else _Scripted(message=_echo(body))
        )
        headers = {"request-id": "req_fake", **scripted.headers}
        if scripted.error is not None:
            status, error_type, message = scripted.error
            return Reply(
                status, error_body(error_type, message), headers=headers, delay=scripted.delay
            )
        if counting:
            assert scripted.count is not None, "a count_tokens request met a scripted message"
            count = at.MessageTokensCount(input_tokens=scripted.count)
            return Reply(body=count.model_dump(mode="json"), headers=headers, delay=scripted.delay)
        events = scripted.events
        if events is None and body.get("stream"):
            assert scripted.message is not None
            events = message_events(scripted.message)
        if events is not None:
            chunks = events_to_sse(events)
            return Reply(
                chunks=[b"".join(chunks)] if scripted.one_write else chunks,
                headers=headers,
                delay=scripted.delay,
                chunk_delay=scripted.chunk_delay,
            )
        assert scripted.message is not None
        return Reply(
            body=scripted.message.model_dump(mode="json"), headers=headers, delay=scripted.delay
        )


def echo_count(body: dict[str, Any]) -> int:
    """The fake's own count of a prompt: deterministic, and unlike the gateway's."""
    return 1000 + len(json.dumps(body, sort_keys=True)) // 3


def _echo(body: dict[str, Any]) -> at.Message:
    last = body["messages"][-1]
    said = " ".join(b.get("text", "") for b in _blocks(last) if b["type"] == "text")
    text = f"fake Anthropic reply to: {said}".strip()
    return text_message(
        text,
        input_tokens=max(1, len(json.dumps(body)) // 4),
        output_tokens=len(text.split()),
        # Anthropic names the model it was asked for
        model=str(body["model"]),
    )
