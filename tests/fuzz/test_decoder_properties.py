"""The project's own fuzz suite, part 2: property tests of the one request decoder
(`gateway.json_body`, and the chat codec's decode built on it) over random bytes, random
nesting and random JSON. Whatever the input, the only failure is a 400 InvalidRequest
that says what was wrong; no RecursionError, UnicodeDecodeError or anything else."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.ingress.openai_chat import OpenAIChatCodec
from gateway.json_body import decode_json_object
from gateway.wire.openai import ChatRequest

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@FAST
@given(st.binary(max_size=2000))
def test_random_bytes_decode_to_an_object_or_a_400(body: bytes) -> None:
    try:
        value = decode_json_object(body)
    except InvalidRequest as error:
        assert error.status == 400 and error.code == "invalid_json" and error.message
    else:
        assert isinstance(value, dict)


@FAST
@given(st.dictionaries(st.text(), json_values, max_size=5), st.integers(0, 300))
def test_random_json_objects_decode_to_themselves_within_the_depth_limit(
    value: dict[str, Any], cut: int
) -> None:
    body = json.dumps(value).encode()
    assert decode_json_object(body) == value
    # and any cut through the same bytes is either still JSON or a 400
    try:
        decode_json_object(body[: cut % (len(body) + 1)])
    except InvalidRequest as error:
        assert error.message


@FAST
@given(st.integers(1, 5000), st.sampled_from(["[]", "{}", "mixed"]), st.integers(8, 300))
def test_nesting_is_refused_exactly_past_the_limit(depth: int, kind: str, limit: int) -> None:
    lists = [kind == "[]" or (kind == "mixed" and i % 2 == 1) for i in range(depth)]
    opens = ["[" if is_list else '{"k":' for is_list in lists]
    closes = ["]" if o == "[" else "}" for o in reversed(opens)]
    body = ('{"x":' + "".join(opens) + "0" + "".join(closes) + "}").encode()
    total = depth + 1
    if total <= limit:
        assert depth_of(decode_json_object(body, max_depth=limit)) == total
    else:
        with pytest.raises(InvalidRequest, match=f"nested more than {limit} levels"):
            decode_json_object(body, max_depth=limit)


@FAST
@given(st.binary(min_size=1, max_size=8), st.integers(0, 40))
def test_bytes_that_are_not_utf8_are_a_400_naming_their_offset(raw: bytes, at: int) -> None:
    junk = bytes(b | 0x80 for b in raw)  # no JSON syntax in it: the UTF-8 check decides
    try:
        junk.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = "x" * (at % 40)
        body = b'{"content": "' + text.encode() + junk + b'"}'
        with pytest.raises(InvalidRequest) as caught:
            decode_json_object(body)
        offset = len(b'{"content": "') + len(text) + exc.start
        assert f"byte offset {offset}" in caught.value.message


@FAST
@given(st.integers(0xD800, 0xDFFF), st.text(max_size=10))
def test_escaped_lone_surrogates_are_a_400_that_names_them(unit: int, before: str) -> None:
    escape = f"\\u{unit:04x}"
    body = b'{"content": ' + json.dumps(before).encode()[:-1] + escape.encode() + b'"}'
    with pytest.raises(InvalidRequest) as caught:
        decode_json_object(body)
    assert escape in caught.value.message and "surrogate" in caught.value.message


chat_like = st.fixed_dictionaries(
    {"model": json_values, "messages": json_values},
    optional={
        "stream": json_values,
        "n": json_values,
        "max_tokens": json_values,
        "tools": json_values,
        "tool_choice": json_values,
    },
)


@FAST
@given(chat_like)
def test_any_chat_shaped_body_parses_or_is_a_400_naming_a_param(body: dict[str, Any]) -> None:
    try:
        decoded = OpenAIChatCodec().decode(msgspec.json.encode(body), {})
    except InvalidRequest as error:
        assert error.status == 400 and error.message
    else:
        assert isinstance(decoded.request, ChatRequest) and decoded.chat_body == body
        assert isinstance(decoded.request.stream, bool)
