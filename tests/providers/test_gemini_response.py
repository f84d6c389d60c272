"""Gemini answers -> OpenAI, whole and streamed. Responses are `google-genai`
GenerateContentResponse objects dumped to the REST JSON; the property test streams
them cut at random points and split across random network reads, and the client's
assembled answer must equal the whole answer's translation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types as gt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamRejected, UpstreamUnavailable
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.sse import SSEEvent
from gateway.usage import Usage
from tests.fakes.gemini_server import (
    call_response,
    dump,
    make_response,
    response_chunks,
    text_response,
    usage,
)
from tests.fakes.gemini_server import (
    error_body as gemini_error,
)
from tests.providers.support import (
    assemble,
    completion_choices,
    encode_sse,
    gemini_target,
    make_call,
    run_stream,
    split_bytes,
    usage_chunk,
)

translation = GeminiTranslation()
CALL = make_call({"messages": [{"role": "user", "content": "hi"}]}, request_id="r9")
STREAM_CALL = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})


def parse(response: gt.GenerateContentResponse) -> tuple[dict[str, Any], Usage]:
    translated = translation.parse_response(
        json.dumps(dump(response)).encode(), CALL, gemini_target()
    )
    completion_choices(translated.body)  # validates against the openai SDK
    return json.loads(translated.body), translated.usage


def stream_chunks(chunks: list[dict[str, Any]], reads: int = 1) -> list[dict[str, Any]]:
    data = encode_sse([(None, c) for c in chunks])
    stream = translation.stream(STREAM_CALL, gemini_target())
    return run_stream(stream, split_bytes(data, range(0, len(data), max(1, len(data) // reads))))


def test_a_text_answer_becomes_a_chat_completion() -> None:
    answer = text_response("Bonjour").model_copy(update={"model_version": "gemini-2.5-flash-001"})
    completion, _ = parse(answer)
    assert completion["model"] == "gemini-2.5-flash-001"
    assert completion["id"] == "chatcmpl-r9"
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Bonjour",
        "refusal": None,
    }
    assert completion["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("OTHER", "stop"),
        ("MALFORMED_FUNCTION_CALL", "stop"),
    ],
)
def test_finish_reasons(reason: str, finish: str) -> None:
    completion, _ = parse(text_response("x", finish_reason=reason))
    assert completion["choices"][0]["finish_reason"] == finish


def test_usage_counts_thoughts_as_output_and_keeps_cached_input() -> None:
    completion, normalized = parse(
        text_response(
            "x", prompt_tokens=1000, output_tokens=50, thoughts_tokens=200, cached_tokens=600
        )
    )
    assert normalized == Usage(
        input_tokens=1000, cached_input_tokens=600, output_tokens=250, reasoning_tokens=200
    )
    assert completion["usage"] == {
        "prompt_tokens": 1000,
        "completion_tokens": 250,
        "total_tokens": 1250,
        "prompt_tokens_details": {"cached_tokens": 600},
        "completion_tokens_details": {"reasoning_tokens": 200},
    }


def test_function_calls_become_tool_calls_with_stable_ids() -> None:
    completion, _ = parse(call_response([("get_weather", {"city": "Paris"}), ("now", {})]))
    message = completion["choices"][0]["message"]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] is None
    assert [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ] == [
        ("call_r9_0", "get_weather", {"city": "Paris"}),
        ("call_r9_1", "now", {}),
    ]


def test_a_thought_signature_rides_in_the_tool_call_id() -> None:
    part = gt.Part(function_call=gt.FunctionCall(name="f", args={}), thought_signature=b"sig")
    completion, _ = parse(make_response([part], finish_reason="STOP", usage=usage(1, 1)))
    assert completion["choices"][0]["message"]["tool_calls"][0]["id"] == "call_r9_0__thought__c2ln"


def test_thought_parts_become_reasoning_content() -> None:
    parts = [gt.Part(text="thinking hard", thought=True), gt.Part(text="42")]
    completion, _ = parse(make_response(parts, finish_reason="STOP", usage=usage(1, 1, 5)))
    assert completion["choices"][0]["message"]["reasoning_content"] == "thinking hard"
    assert completion["choices"][0]["message"]["content"] == "42"


def test_a_blocked_prompt_is_a_content_filter_finish() -> None:
    response = gt.GenerateContentResponse(
        prompt_feedback=gt.GenerateContentResponsePromptFeedback(
            block_reason=gt.BlockedReason.SAFETY
        ),
        usage_metadata=usage(12, 0),
    )
    completion, normalized = parse(response)
    assert completion["choices"][0]["finish_reason"] == "content_filter"
    assert normalized.input_tokens == 12


def test_several_candidates_become_several_choices() -> None:
    response = gt.GenerateContentResponse(
        candidates=[
            gt.Candidate(
                content=gt.Content(role="model", parts=[gt.Part(text=t)]),
                finish_reason=gt.FinishReason.STOP,
                index=i,
            )
            for i, t in enumerate(["one", "two"])
        ],
        usage_metadata=usage(3, 4),
    )
    completion, _ = parse(response)
    assert [c["message"]["content"] for c in completion["choices"]] == ["one", "two"]


# -- streaming -----------------------------------------------------------------------


def test_stream_opens_with_the_role_and_ends_with_finish_then_usage() -> None:
    chunks = stream_chunks(
        response_chunks(text_response("Hello streaming world", prompt_tokens=9, output_tokens=3))
    )
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert assemble(chunks)[0]["content"] == "Hello streaming world"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert usage_chunk(chunks) == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def test_streamed_function_calls_send_id_and_name_before_arguments() -> None:
    chunks = stream_chunks(response_chunks(call_response([("get_weather", {"city": "Oslo"})])))
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls[0]["id"] == "call_req1_0"
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert json.loads(calls[1]["function"]["arguments"]) == {"city": "Oslo"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_running_usage_is_kept_for_an_abandoned_stream() -> None:
    stream = translation.stream(STREAM_CALL, gemini_target())
    first = response_chunks(text_response("a long answer here", prompt_tokens=21))[0]
    stream.feed(SSEEvent(json.dumps(first).encode()))
    assert stream.usage == Usage(input_tokens=21)


def test_an_abandoned_stream_keeps_the_text_its_usage_does_not_count_yet() -> None:
    # Gemini's running usage counts the prompt only; the output count comes at the end
    stream = translation.stream(STREAM_CALL, gemini_target())
    chunks = response_chunks(
        text_response("a long answer here, cut short", prompt_tokens=21, output_tokens=9)
    )
    for chunk in chunks[:2]:
        stream.feed(SSEEvent(json.dumps(chunk).encode()))
    streamed = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks[:2])
    assert streamed and stream.unreported_text == streamed
    for chunk in chunks[2:]:
        stream.feed(SSEEvent(json.dumps(chunk).encode()))
    # the final count arrived: nothing left to estimate
    assert stream.unreported_text is None
    assert stream.usage == Usage(input_tokens=21, output_tokens=9)


@pytest.mark.parametrize(
    ("status", "code", "expected", "retryable"),
    [
        (503, "UNAVAILABLE", UpstreamUnavailable, True),
        (500, "INTERNAL", UpstreamUnavailable, True),
        (429, "RESOURCE_EXHAUSTED", UpstreamRejected, True),
        (400, "INVALID_ARGUMENT", UpstreamRejected, False),
    ],
)
def test_an_error_inside_the_stream_raises_the_mapped_error(
    status: int, code: str, expected: type[Exception], retryable: bool
) -> None:
    stream = translation.stream(STREAM_CALL, gemini_target())
    body = gemini_error(code, "The model is overloaded.")
    body["error"]["code"] = status
    with pytest.raises(expected) as caught:
        stream.feed(SSEEvent(json.dumps(body).encode()))
    assert caught.value.retryable is retryable  # type: ignore[attr-defined]


texts = st.text(min_size=1, max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def responses(draw: st.DrawFn) -> gt.GenerateContentResponse:
    parts: list[gt.Part] = []
    if draw(st.booleans()):
        parts.append(gt.Part(text=draw(texts), thought=True))
    parts += [gt.Part(text=draw(texts)) for _ in range(draw(st.integers(0, 2)))]
    for n in range(draw(st.integers(0, 3))):
        args = draw(st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=3))
        parts.append(gt.Part(function_call=gt.FunctionCall(name=f"fn{n}", args=args)))
    if not parts:
        parts.append(gt.Part(text=draw(texts)))
    reason = draw(st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY"]))
    metadata = usage(
        draw(st.integers(0, 10_000)),
        draw(st.integers(0, 10_000)),
        draw(st.none() | st.integers(0, 1000)),
        draw(st.none() | st.integers(0, 1000)),
    )
    return make_response(parts, finish_reason=reason, usage=metadata)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    response=responses(),
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=10),
    byte_cuts=st.lists(st.integers(0, 100_000), max_size=30),
)
def test_streamed_and_whole_answers_agree_whatever_the_splits(
    response: gt.GenerateContentResponse, sizes: list[int], byte_cuts: list[int]
) -> None:
    def split(text: str) -> list[str]:
        out, i, k = [], 0, 0
        while i < len(text):
            out.append(text[i : i + sizes[k % len(sizes)]])
            i, k = i + sizes[k % len(sizes)], k + 1
        return out

    data = encode_sse([(None, c) for c in response_chunks(response, split)])
    stream = translation.stream(STREAM_CALL, gemini_target())
    chunks = run_stream(stream, split_bytes(data, byte_cuts))
    whole = translation.parse_response(
        json.dumps(dump(response)).encode(), STREAM_CALL, gemini_target()
    )
    got, want = assemble(chunks)[0], completion_choices(whole.body)[0]
    assert (got["content"] or None) == (want["content"] or None)
    assert got["reasoning"] == want["reasoning"]
    assert got["finish_reason"] == want["finish_reason"]
    assert [
        (c["id"], c["name"], json.loads(c["arguments"])) for c in got["tool_calls"].values()
    ] == [(c["id"], c["name"], json.loads(c["arguments"])) for c in want["tool_calls"].values()]
    assert stream.usage == whole.usage
    assert usage_chunk(chunks) == json.loads(whole.body)["usage"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=responses(),
    second=responses(),
    order=st.lists(st.booleans(), max_size=60),
    byte_cuts=st.lists(st.integers(0, 100_000), max_size=20),
)
def test_interleaved_candidates_assemble_into_their_own_choices(
    first: gt.GenerateContentResponse,
    second: gt.GenerateContentResponse,
    order: list[bool],
    byte_cuts: list[int],
) -> None:
    """With n=2 Gemini streams both candidates' chunks in any interleaving; each choice
    must assemble as if it had been streamed alone."""
    queues = []
    for index, response in enumerate((first, second)):
        chunks = response_chunks(response, lambda s: [s[i : i + 3] for i in range(0, len(s), 3)])
        for chunk in chunks:
            chunk["candidates"][0]["index"] = index
            chunk.pop("usageMetadata")
        queues.append(chunks)
    merged: list[dict[str, Any]] = []
    picks = iter(order)
    while queues[0] or queues[1]:
        side = 0 if not queues[1] else 1 if not queues[0] else int(next(picks, False))
        merged.append(queues[side].pop(0))
    merged.append({"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 7}})
    stream = translation.stream(STREAM_CALL, gemini_target())
    data = encode_sse([(None, c) for c in merged])
    streamed = assemble(run_stream(stream, split_bytes(data, byte_cuts)))
    assert streamed.keys() == {0, 1}
    for index, response in enumerate((first, second)):
        whole = translation.parse_response(
            json.dumps(dump(response)).encode(), STREAM_CALL, gemini_target()
        )
        want = completion_choices(whole.body)[0]
        got = streamed[index]
        assert (got["content"] or None) == (want["content"] or None)
        assert got["reasoning"] == want["reasoning"]
        assert got["finish_reason"] == want["finish_reason"]
        assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"].values()] == [
            (c["name"], json.loads(c["arguments"])) for c in want["tool_calls"].values()
        ]
    assert stream.usage == Usage(input_tokens=5, output_tokens=7)
