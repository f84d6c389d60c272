"""The OpenAI wire shapes the emulator reads and writes, built for speed.

Requests are decoded into a lenient struct: fields the emulator does not use (sampling
parameters, SGLang/vLLM extras such as `top_k`) are ignored, not rejected, and the fields
it uses take what the gateway's own chat decoder takes (nulls, whole-number floats such
as `"n": 2.0`, `custom` tools, a zero token cap): `gateway dev` must accept whatever
production accepts. Responses are plain dicts encoded with msgspec, in the exact shape
the `openai` SDK parses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from gateway.emulator.generation import PlannedToolCall, Reply
from gateway.emulator.logprobs import token_logprobs
from gateway.wire.openai import (
    AnyTool,
    Message,
    ResponseFormat,
    StreamOptions,
    Tool,
    ToolChoice,
)


class EmulatorRequest(Struct):
    messages: Annotated[list[Message], Meta(min_length=1)]
    model: str = ""
    # `"stream": null` means no stream, as the gateway reads it
    stream_flag: bool | None = msgspec.field(default=None, name="stream")
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Meta(ge=0)] | None = None
    max_completion_tokens: Annotated[int, Meta(ge=0)] | None = None
    stop: str | list[str] | None = None
    tools: list[AnyTool] | None = None
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    # OpenAI's own bound: past it the emulator refuses, as OpenAI would
    choices: Annotated[int, Meta(ge=1, le=128)] | None = msgspec.field(default=None, name="n")
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    # SGLang/vLLM extra: generate exactly the token limit (benchmarks use it)
    ignore_eos: bool | None = None

    @property
    def stream(self) -> bool:
        return bool(self.stream_flag)

    @property
    def n(self) -> int:
        return self.choices or 1

    @property
    def logprobs_top(self) -> int | None:
        """None without `logprobs`; else how many alternatives each token lists."""
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def limit(self) -> int | None:
        """The cap on generated tokens, whichever field carried it (0 included)."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

    def function_tools(self) -> list[Tool] | None:
        """The tools the emulator can call (it answers `custom` tools in text)."""
        if self.tools is None:
            return None
        return [tool for tool in self.tools if isinstance(tool, Tool)]

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def wants_usage_chunk(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


_decoder = msgspec.json.Decoder(EmulatorRequest)
_encode = msgspec.json.Encoder().encode
_PATH = re.compile(r"`\$\.([^`\[]+)")
_MISSING = re.compile(r"missing required field `([^`]+)`")


def decode_request(body: bytes) -> EmulatorRequest:
    try:
        return _decoder.decode(body)
    except msgspec.ValidationError:
        # not in the strict shape: read it as the gateway does (whole-number floats
        # where an integer goes), which costs a second pass only for such bodies
        pass
    except msgspec.DecodeError as error:
        raise BadRequest(f"request body is not valid JSON: {error}") from None
    try:
        return msgspec.convert(msgspec.json.decode(body), EmulatorRequest, strict=False)
    except msgspec.ValidationError as error:
        text = str(error)
        missing = _MISSING.search(text)
        path = _PATH.search(text)
        param = missing.group(1) if missing else (path.group(1) if path else None)
        raise BadRequest(text, param) from None
    except msgspec.DecodeError as error:
        raise BadRequest(f"request body is not valid JSON: {error}") from None


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    kind = "invalid_request_error" if status < 500 else "server_error"
    code = {
        400: "invalid_request",
        404: "not_found",
        405: "method_not_allowed",
        429: "rate_limit_exceeded",
        503: "service_unavailable",
    }.get(status)
    return _encode({"error": {"message": message, "type": kind, "param": param, "code": code}})


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_body(
    completion_id: str,
    created: int,
    model: str,
    replies: Sequence[Reply],
    usage_block: dict[str, Any],
    logprobs_top: int | None = None,
) -> bytes:
    """A `chat.completion` with one choice per reply (`n`)."""
    choices = []
    for index, reply in enumerate(replies):
        # `refusal` is part of the message in OpenAI's schema (null when not refused)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.tool_call is not None:
            message["content"] = None
            message["tool_calls"] = [_tool_call(reply.tool_call, "".join(reply.pieces[1:]))]
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": _logprobs(reply, logprobs_top),
                "finish_reason": reply.finish_reason,
            }
        )
    return _encode(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_emulated",
            "choices": choices,
            "usage": usage_block,
        }
    )


def _logprobs(reply: Reply, top: int | None) -> dict[str, Any] | None:
    if top is None:
        return None
    return {"content": token_logprobs(reply.pieces, top, reply.digest), "refusal": None}


def _tool_call(call: PlannedToolCall, arguments: str) -> dict[str, Any]:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


class StreamWriter:
    """SSE events of one streamed completion, as OpenAI sends them: each choice (`n`)
    advances one piece per produced token and ends with its own finish_reason."""

    __slots__ = ("_done", "_head", "_logprobs", "_replies", "_sent")

    def __init__(
        self,
        completion_id: str,
        created: int,
        model: str,
        replies: Sequence[Reply],
        logprobs_top: int | None = None,
    ) -> None:
        self._head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_emulated",
        }
        self._replies = list(replies)
        self._sent = [0] * len(self._replies)
        self._done = [False] * len(self._replies)
        self._logprobs = [
            token_logprobs(r.pieces, logprobs_top, r.digest) if logprobs_top is not None else None
            for r in self._replies
        ]

    def events(self, produced: int, finished: bool) -> bytes:
        """Events for the pieces up to `produced`; each choice's last carries its
        finish_reason (a shorter choice ends before the longest one)."""
        out: list[bytes] = []
        for choice, reply in enumerate(self._replies):
            if self._done[choice]:
                continue
            upto = min(produced, reply.tokens)
            sent = self._sent[choice]
            if sent == 0 and upto > 0 and reply.tool_call is None:
                role = {"role": "assistant", "content": ""}
                out.append(self._event(choice, role, None, None))
            ends = finished or upto == reply.tokens
            for index in range(sent, upto):
                last = ends and index == upto - 1
                reason = reply.finish_reason if last else None
                logprobs = self._logprobs[choice]
                entry = {"content": [logprobs[index]], "refusal": None} if logprobs else None
                out.append(self._event(choice, self._delta(reply, index), reason, entry))
                if last:
                    self._done[choice] = True
            self._sent[choice] = upto
        return b"".join(out)

    def usage_event(self, usage_block: dict[str, Any]) -> bytes:
        return b"data: " + _encode({**self._head, "choices": [], "usage": usage_block}) + b"\n\n"

    @staticmethod
    def _delta(reply: Reply, index: int) -> dict[str, Any]:
        call = reply.tool_call
        if call is None:
            return {"content": reply.pieces[index]}
        if index == 0:
            header = {"index": 0, **_tool_call(call, "")}
            return {"role": "assistant", "content": None, "tool_calls": [header]}
        return {"tool_calls": [{"index": 0, "function": {"arguments": reply.pieces[index]}}]}

    def _event(
        self,
        choice: int,
        delta: dict[str, Any],
        finish_reason: str | None,
        logprobs: dict[str, Any] | None,
    ) -> bytes:
        body = {
            "index": choice,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }
        return b"data: " + _encode({**self._head, "choices": [body]}) + b"\n\n"


DONE_EVENT = b"data: [DONE]\n\n"
