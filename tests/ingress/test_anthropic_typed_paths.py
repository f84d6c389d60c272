"""The Messages codec's typed fast paths write and accept what the plain-JSON paths do."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.ingress.anthropic_messages import _encode_parsed, decode_json, encode_message
from gateway.json_body import decode_json_object
from gateway.usage import Usage


def _outcome(encode: Any, *args: Any) -> Any:
    try:
        return encode(*args)
    except Exception as error:  # the same failure, whatever it is
        return type(error), str(error)


def _decoded_then_encoded(raw: bytes, given: Usage | None) -> bytes:
    return _encode_parsed(msgspec.json.decode(raw), "req/1", "deployment", given)


_MESSAGES: list[Any] = [
    {"role": "assistant", "content": "Four."},
    {"role": "assistant", "content": ""},
    {"role": "assistant", "content": None, "reasoning_content": "thinking"},
    {"role": "assistant", "content": ["odd"]},
    {
        "role": "assistant",
        "content": "Calling.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"type": "function", "function": {"arguments": "[1]"}},
            {"function": None},
        ],
    },
    {"role": "assistant", "content": "x", "tool_calls": "odd"},
    {},
    None,
]

_USAGES: list[Any] = [
    {"prompt_tokens": 500, "completion_tokens": 64, "total_tokens": 564},
    {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2},
    },
    {"prompt_tokens": 9, "prompt_cache_hit_tokens": 20, "prompt_tokens_details": {}},
    {"prompt_tokens": 9.0, "completion_tokens": True},
    {},
    None,
]


@pytest.mark.parametrize("message", _MESSAGES)
@pytest.mark.parametrize("finish", ["stop", "length", "tool_calls", None, 3])
@pytest.mark.parametrize("model", ["served-snapshot", "", None])
def test_encode_message_writes_what_the_plain_json_path_writes(
    message: Any, finish: Any, model: Any
) -> None:
    for usage in _USAGES:
        for given in (None, Usage(input_tokens=7, output_tokens=2)):
            answer: dict[str, Any] = {
                "id": "chatcmpl-1",
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
            if usage is not None:
                answer["usage"] = usage
            raw = json.dumps(answer).encode()
            expected = _outcome(_decoded_then_encoded, raw, given)
            assert _outcome(encode_message, raw, "req/1", "deployment", given) == expected


@pytest.mark.parametrize(
    "answer", [{"choices": []}, {"choices": None}, {}, {"choices": [{}]}, {"choices": [1]}]
)
def test_answers_without_choices_encode_as_the_plain_json_path_does(answer: Any) -> None:
    raw = json.dumps(answer).encode()
    typed = _outcome(lambda: encode_message(raw, "r", "d"))
    plain = _outcome(lambda: _encode_parsed(msgspec.json.decode(raw), "r", "d", None))
    assert typed == plain


def _nested(levels: int) -> Any:
    value: Any = "x"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize("max_depth", [8, 128])
@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"model": "m", "system": "[{" * 300}).encode(),
        json.dumps({"model": "m"}).encode(),
        *(json.dumps({"x": _nested(n)}).encode() for n in (6, 7, 8, 126, 127, 128, 200)),
        b"[1]",
        b"",
        b'{"a": ',
        b'{"a": "\\ud800"}',
        b"\xff",
    ],
)
def test_decode_json_decides_as_the_shared_decoder_does(raw: bytes, max_depth: int) -> None:
    def outcome(read: Any) -> Any:
        try:
            return read(raw, max_depth=max_depth)
        except InvalidRequest as error:
            return (error.message, error.code)

    assert outcome(decode_json) == outcome(decode_json_object)
