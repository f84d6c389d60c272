"""`gateway dev`'s emulator stands in for production's upstream: what the gateway's chat
decoder accepts, the emulator's decoder accepts too. Hypothesis draws requests over the
fields of the gateway's own request schema (`gateway.wire.openai.ChatRequest`), in the
spellings clients send them (nulls, whole-number floats, `custom` tools, zero caps); those
the gateway takes must decode in the emulator and mean the same thing there.

Bounded where OpenAI itself bounds a field the gateway leaves to the upstream (`n` up to
128, `top_logprobs` up to 20): the emulator refuses past those as OpenAI does."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.emulator.wire import BadRequest, decode_request
from gateway.errors import InvalidRequest
from gateway.ingress.openai_chat import OpenAIChatCodec
from gateway.wire.openai import ChatRequest

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

gateway_chat = OpenAIChatCodec()


def whole(low: int, high: int) -> st.SearchStrategy[Any]:
    """An integer as clients spell it: `3`, or the float `3.0`."""
    return st.integers(low, high).flatmap(lambda n: st.sampled_from([n, float(n)]))


def maybe_null(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values)


FUNCTION_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "apply_patch", "description": "a diff"}}
GRAMMAR_TOOL = {
    "type": "custom",
    "custom": {
        "name": "sql",
        "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/"}},
    },
}
TOOL_CHOICES = [
    "auto",
    "none",
    "required",
    {"type": "function", "function": {"name": "get_weather"}},
    {"type": "custom", "custom": {"name": "apply_patch"}},
]
MESSAGES = [
    [{"role": "user", "content": "What is the weather in Oslo?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [
        {"role": "developer", "content": "terse"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ],
    [
        {"role": "user", "content": "patch it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "x"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ],
]

optional_fields: dict[str, st.SearchStrategy[Any]] = {
    "stream": maybe_null(st.booleans()),
    "stream_options": maybe_null(st.fixed_dictionaries({"include_usage": st.booleans()})),
    "max_tokens": maybe_null(whole(0, 64)),
    "max_completion_tokens": maybe_null(whole(0, 64)),
    "temperature": maybe_null(st.sampled_from([0, 0.0, 0.7, 1, 2.0])),
    "top_p": maybe_null(st.sampled_from([0, 0.5, 1, 1.0])),
    "n": maybe_null(whole(1, 4)),
    "seed": maybe_null(whole(-(2**31), 2**31)),
    "stop": maybe_null(
        st.one_of(st.just("\n"), st.lists(st.sampled_from(["END", "##"]), max_size=2))
    ),
    "presence_penalty": maybe_null(st.sampled_from([-2, 0, 0.5, 2.0])),
    "frequency_penalty": maybe_null(st.sampled_from([-2.0, 0, 1])),
    "tools": maybe_null(
        st.lists(st.sampled_from([FUNCTION_TOOL, CUSTOM_TOOL, GRAMMAR_TOOL]), max_size=3)
    ),
    "tool_choice": maybe_null(st.sampled_from(TOOL_CHOICES)),
    "parallel_tool_calls": maybe_null(st.booleans()),
    "response_format": maybe_null(st.sampled_from([{"type": "text"}, {"type": "json_object"}])),
    "user": maybe_null(st.text(max_size=8)),
    "logprobs": maybe_null(st.booleans()),
    "top_logprobs": maybe_null(whole(0, 20)),
    "metadata": maybe_null(st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=4))),
}


@st.composite
def chat_requests(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": draw(st.sampled_from(["emu-8b", "auto", "gpt-4.1"])),
        "messages": draw(st.sampled_from(MESSAGES)),
    }
    for name in draw(st.lists(st.sampled_from(sorted(optional_fields)), unique=True)):
        body[name] = draw(optional_fields[name])
    return body


def test_the_strategy_covers_every_field_of_the_gateways_request() -> None:
    fields = {f.encode_name for f in __import__("msgspec").structs.fields(ChatRequest)}
    assert fields - {"model", "messages"} == set(optional_fields)


@FAST
@given(chat_requests())
def test_the_emulator_accepts_every_chat_request_the_gateway_accepts(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    try:
        accepted = gateway_chat.decode(raw, {}).request
    except InvalidRequest:
        return  # the gateway refuses it too
    assert isinstance(accepted, ChatRequest)
    try:
        emulated = decode_request(raw)
    except BadRequest as refused:
        raise AssertionError(f"the emulator refused {body}: {refused.message}") from None
    # and reads it the same way
    assert emulated.stream == accepted.stream
    assert emulated.limit == accepted.output_limit
    assert emulated.n == (accepted.n or 1)
    assert emulated.seed == accepted.seed
    assert bool(emulated.logprobs) == bool(accepted.logprobs)
    assert len(emulated.tools or ()) == len(accepted.tools or ())
