"""The Responses codec: requests become the internal chat request, chat answers and
chat streams become Response objects and event streams the official SDK parses."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from openai.types.responses import Response

from gateway.errors import InvalidRequest, UpstreamUnavailable
from gateway.ingress.base import EncodeContext
from gateway.ingress.namespace_tools import flat_name
from gateway.ingress.openai_responses import (
    OpenAIResponsesCodec,
    ResponseContext,
    ResponsesStreamEncoder,
    decode,
    encode_decoded,
    encode_response,
    response_body,
    response_context,
    sse_frame,
    to_chat,
    usage_from_chat,
)
from gateway.usage import Usage
from tests.ingress.support import (
    comparable,
    finish_chunk,
    parse_frames,
    replay,
    text_chunk,
    tool_chunk,
)


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "gpt-4.1", **fields}).encode()


def chat_of(**fields: Any) -> dict[str, Any]:
    call = decode(body(**fields))
    return to_chat(call.request, call.input_items)[1]


def context(**fields: Any) -> ResponseContext:
    return ResponseContext(
        "resp_abc", 1700000000, "smart", decode(body(input="x", **fields)).request
    )


# -- decode ---------------------------------------------------------------------------


def test_string_input_and_instructions_become_system_and_user_messages() -> None:
    chat = chat_of(input="What is 2+2?", instructions="Answer tersely.")
    assert chat["messages"] == [
        {"role": "system", "content": "Answer tersely."},
        {"role": "user", "content": "What is 2+2?"},
    ]


def test_message_items_keep_order_roles_and_parts() -> None:
    chat = chat_of(
        input=[
            {"role": "developer", "content": [{"type": "input_text", "text": "Be kind."}]},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe"},
                    {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]},
            {"role": "user", "content": "Thanks"},
        ]
    )
    assert chat["messages"] == [
        {"role": "system", "content": "Be kind."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "Thanks"},
    ]


def test_function_calls_and_outputs_round_trip_as_tool_calls_and_tool_messages() -> None:
    chat = chat_of(
        input=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"c":"P"}'},
            {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"c":"R"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "rain"}],
            },
        ],
        tools=[{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
        tool_choice={"type": "function", "name": "weather"},
    )
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"c":"P"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"c":"R"}'},
            },
        ],
    }
    assert chat["messages"][2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}


def test_settings_map_to_their_chat_fields_and_gateway_fields_stay_behind() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    chat = chat_of(
        input="hi",
        max_output_tokens=50,
        temperature=0.2,
        reasoning={"effort": "low"},
        text={"format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}},
        metadata={"team": "search"},
        store=False,
    )
    assert chat["max_completion_tokens"] == 50
    assert chat["temperature"] == 0.2
    assert chat["reasoning_effort"] == "low"
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "A", "schema": schema, "strict": True},
    }
    assert "metadata" not in chat and "store" not in chat


def test_the_typed_chat_request_is_what_routing_and_limits_read() -> None:
    call = decode(body(input="hi", max_output_tokens=7, stream=True))
    request, _ = to_chat(call.request, call.input_items)
    assert request.model == "gpt-4.1"
    assert request.output_limit == 7
    assert request.stream
    assert request.messages[0].text() == "hi"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": 5}, "input"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.name"),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        call = decode(body(**fields))
        to_chat(call.request, call.input_items)
    assert raised.value.param == param


def test_missing_model_and_bad_json_are_400s() -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode(b'{"input": "x"}')
    assert raised.value.param == "model"
    with pytest.raises(InvalidRequest):
        decode(b"{not json")
    with pytest.raises(InvalidRequest):
        decode(b"[" * 200 + b"]" * 200)


def test_builtin_tools_are_kept_aside_for_the_provider_translation() -> None:
    raw = body(
        input="news?",
        tools=[
            {"type": "function", "name": "f", "parameters": {}},
            {"type": "web_search_preview"},
        ],
        tool_choice={"type": "web_search_preview"},
    )
    call = decode(raw)
    _, chat = to_chat(call.request, call.input_items)
    assert [t["function"]["name"] for t in chat["tools"]] == ["f"]
    decoded = OpenAIResponsesCodec().decode(raw, {})
    assert decoded.untranslatable is None
    assert decoded.builtin_tools == ("web_search_preview",)


@pytest.mark.parametrize(
    ("fields", "builtin"),
    [
        ({}, ()),
        ({"tool_choice": "auto"}, ()),
        ({"tools": []}, ()),
        # a built-in tool_choice without tools is still one (the provider decides)
        ({"tool_choice": {"type": "web_search_preview"}}, ("web_search_preview",)),
    ],
)
def test_builtin_tools_are_found_in_tool_choice_even_without_tools(
    fields: dict[str, Any], builtin: tuple[str, ...]
) -> None:
    decoded = OpenAIResponsesCodec().decode(body(input="news?", **fields), {})
    assert decoded.builtin_tools == builtin


CODEX_NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "close_agent",
            "description": "Close an agent.",
            "strict": False,
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        },
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
    ],
}


def test_namespace_tools_become_flat_functions_and_client_only_fields_are_named_dropped() -> None:
    raw = body(
        input="go",
        tools=[CODEX_NAMESPACE, {"type": "web_search", "external_web_access": False}],
        client_metadata={"turn_id": "t"},
        include=["reasoning.encrypted_content"],
    )
    decoded = OpenAIResponsesCodec().decode(raw, {})
    names = [t["function"]["name"] for t in decoded.chat_body["tools"]]
    assert names == ["multi_agent_v1__close_agent", "multi_agent_v1__spawn_agent"]
    assert decoded.chat_body["tools"][0]["function"]["description"] == "Close an agent."
    assert "client_metadata" not in decoded.chat_body
    assert decoded.translation_changes == (
        "flattened:multi_agent_v1",
        "dropped:client_metadata",
        "dropped:include",
    )
    assert decoded.builtin_tools == ("web_search",)


def test_a_namespaced_call_comes_back_in_its_namespace_and_goes_up_flat_again() -> None:
    raw = body(input="go", tools=[CODEX_NAMESPACE])
    call = decode(raw)
    ctx = ResponseContext("resp_1", 1, "m", call.request)
    completion = json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "multi_agent_v1__close_agent",
                                    "arguments": '{"target": "a"}',
                                },
                            }
                        ],
                    },
                }
            ]
        }
    ).encode()
    item = encode_response(completion, Usage(), ctx)["output"][-1]
    assert (item["name"], item["namespace"]) == ("close_agent", "multi_agent_v1")
    # the next turn sends the call back as the client got it: flat again upstream
    history = [item, {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]
    _, chat = to_chat(call.request, [*call.input_items, *history])
    sent = chat["messages"][-2]["tool_calls"][0]["function"]["name"]
    assert sent == "multi_agent_v1__close_agent"


def test_a_streamed_namespaced_call_comes_back_in_its_namespace() -> None:
    call = decode(body(input="go", tools=[CODEX_NAMESPACE], stream=True))
    encoder = ResponsesStreamEncoder(ResponseContext("resp_1", 1, "m", call.request))
    delta = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"},
    }
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}
    frames = encoder.feed(json.dumps(chunk).encode()) + encoder.finish(Usage())
    events = [json.loads(f.split(b"data: ", 1)[1]) for f in frames]
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert added[-1]["name"] == "spawn_agent" and added[-1]["namespace"] == "multi_agent_v1"
    final = events[-1]["response"]["output"][-1]
    assert (final["name"], final["namespace"]) == ("spawn_agent", "multi_agent_v1")


def test_flat_names_stay_within_what_every_provider_accepts() -> None:
    long = flat_name("n" * 40, "a.b/" + "c" * 40)
    assert len(long) <= 64 and re.fullmatch(r"[A-Za-z0-9_-]+", long)
    assert long != flat_name("n" * 40, "a.b/" + "c" * 39 + "d")


def test_history_items_come_first_and_errors_in_them_name_previous_response_id() -> None:
    call = decode(body(input="and now?"))
    history = [
        {"type": "message", "role": "user", "content": "first"},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "one", "annotations": []}],
        },
    ]
    _, chat = to_chat(call.request, history + call.input_items, history=len(history))
    assert [m["content"] for m in chat["messages"]] == ["first", "one", "and now?"]
    with pytest.raises(InvalidRequest) as raised:
        to_chat(call.request, [{"type": "web_search_call"}, *call.input_items], history=1)
    assert raised.value.param == "previous_response_id.type"


# -- encode ---------------------------------------------------------------------------


def completion(message: dict[str, Any], finish: str = "stop") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    ).encode()


def test_a_completion_becomes_a_response_the_sdk_parses() -> None:
    ctx = context(metadata={"team": "a"}, instructions="be brief")
    usage = Usage(input_tokens=12, cached_input_tokens=2, output_tokens=5, reasoning_tokens=1)
    out = encode_response(completion({"role": "assistant", "content": "Four."}), usage, ctx)
    response = Response.model_validate(out)
    assert response.id == "resp_abc"
    assert response.model == "smart"
    assert response.output_text == "Four."
    assert response.status == "completed"
    assert response.metadata == {"team": "a"}
    assert response.instructions == "be brief"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 5)
    assert response.usage.input_tokens_details.cached_tokens == 2
    assert response.usage.output_tokens_details.reasoning_tokens == 1
    assert response.usage.total_tokens == 17


def test_tool_calls_become_function_call_items() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    response = Response.model_validate(
        encode_response(completion(message, "tool_calls"), Usage(), context())
    )
    assert len(response.output) == 1
    item = response.output[0]
    assert item.type == "function_call"
    assert (item.call_id, item.name, item.arguments) == ("call_9", "f", "{}")


def test_a_cut_short_answer_is_incomplete_with_the_reason() -> None:
    response = Response.model_validate(
        encode_response(
            completion({"role": "assistant", "content": "Fo"}, "length"), Usage(), context()
        )
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


# -- stream ---------------------------------------------------------------------------


def test_a_text_stream_is_the_typed_event_sequence_with_sequence_numbers() -> None:
    encoder = ResponsesStreamEncoder(context())
    frames = []
    for chunk in (text_chunk("Hel"), text_chunk("lo"), finish_chunk("stop")):
        frames.extend(encoder.feed(chunk))
    frames.extend(encoder.finish(Usage(input_tokens=3, output_tokens=2), Decimal("0.001")))
    events = parse_frames(frames)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = replay(events)
    assert final.output_text == "Hello"
    assert final.usage is not None and final.usage.output_tokens == 2
    assert events[-1]["response"]["x_gateway"] == {"cost_usd": "0.001"}


def test_a_streamed_answer_equals_the_non_streamed_one() -> None:
    ctx = context()
    usage = Usage(input_tokens=9, output_tokens=4)
    encoder = ResponsesStreamEncoder(ctx)
    frames = []
    for chunk in (
        text_chunk("Let me check."),
        tool_chunk(0, call_id="call_1", name="weather", arguments='{"city":'),
        tool_chunk(0, arguments='"Paris"}'),
        finish_chunk("tool_calls"),
    ):
        frames.extend(encoder.feed(chunk))
    frames.extend(encoder.finish(usage, None))
    streamed = replay(parse_frames(frames))
    message = {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    whole = Response.model_validate(encode_response(completion(message, "tool_calls"), usage, ctx))
    assert comparable(streamed) == comparable(whole)


def test_a_tool_call_named_late_is_announced_once_named_with_all_its_arguments() -> None:
    encoder = ResponsesStreamEncoder(context())
    frames = encoder.feed(tool_chunk(0, call_id="c", arguments='{"a"'))
    frames += encoder.feed(tool_chunk(0, name="f", arguments=":1}"))
    frames += encoder.finish(Usage(), None)
    final = replay(parse_frames(frames))
    item = final.output[0]
    assert item.type == "function_call"
    assert (item.name, item.arguments) == ("f", '{"a":1}')


def test_an_empty_stream_still_completes_with_one_empty_message() -> None:
    encoder = ResponsesStreamEncoder(context())
    final = replay(parse_frames(encoder.finish(None, None)))
    assert final.output_text == ""
    assert final.status == "completed"


def test_an_upstream_failure_ends_the_stream_with_error_and_response_failed() -> None:
    encoder = ResponsesStreamEncoder(context())
    frames = encoder.feed(text_chunk("par"))
    frames += encoder.error(UpstreamUnavailable("upstream crashed", provider="p"))
    events = parse_frames(frames)
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-2]["message"] == "upstream crashed"
    failed = Response.model_validate(events[-1]["response"])
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.message == "upstream crashed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


_WHOLE_REQUESTS = [
    {"input": "Hi", "store": False, "max_output_tokens": 64, "instructions": "Be brief."},
    {
        "input": "Hi",
        "metadata": {"k": "v"},
        "temperature": 1,
        "top_p": 0.5,
        "user": "u1",
        "truncation": "auto",
        "parallel_tool_calls": False,
        "previous_response_id": "resp_earlier",
        "text": {"format": {"type": "json_object"}, "verbosity": "low"},
        "reasoning": {"effort": "high"},
        "tool_choice": "required",
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "tools": [{"type": "function", "name": "spawn"}],
            },
        ],
        "client_metadata": {"x": 1},
    },
    {"input": "Hi", "text": {"verbosity": "low"}},
]

_WHOLE_ANSWERS: list[Any] = [
    {"role": "assistant", "content": "Four."},
    {"role": "assistant", "content": ""},
    {"role": "assistant", "content": None},
    {"role": "assistant", "content": None, "refusal": "No."},
    {"role": "assistant", "content": "Sure.", "refusal": ""},
    {
        "role": "assistant",
        "content": "Calling.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"type": "function", "function": {"name": flat_name("multi_agent_v1", "spawn")}},
        ],
    },
    {"role": "assistant", "content": "x", "tool_calls": []},
    {"role": "assistant", "content": [{"type": "text", "text": "a list"}]},
    None,
]

_WHOLE_USAGES: list[Any] = [
    {"prompt_tokens": 500, "completion_tokens": 64, "total_tokens": 564},
    {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 1},
    },
    {"prompt_tokens": 9, "prompt_tokens_details": None, "completion_tokens_details": {}},
    {"prompt_tokens": 9.0, "completion_tokens": True},
    {},
    None,
]


@pytest.mark.parametrize("fields", _WHOLE_REQUESTS)
@pytest.mark.parametrize("message", _WHOLE_ANSWERS)
@pytest.mark.parametrize("finish", ["stop", "length", "content_filter", None])
def test_the_codec_writes_the_bytes_the_response_object_encodes_to(
    fields: dict[str, Any], message: Any, finish: str | None
) -> None:
    # the codec's whole-answer path reads typed structs; what it writes is the dict
    # path's JSON, byte for byte, for every answer (and a plain-dict native body)
    codec = OpenAIResponsesCodec()
    decoded = codec.decode(body(**fields), {})
    for usage in _WHOLE_USAGES:
        answer: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if usage is not None:
            answer["usage"] = usage
        completion = json.dumps(answer).encode()
        for native in (decoded.native_body, dict(decoded.native_body)):
            ctx = EncodeContext("req1", 1700000000, "served-model", False, native)
            chat = json.loads(completion)
            expected = msgspec.json.encode(
                encode_decoded(chat, usage_from_chat(chat.get("usage")), response_context(ctx))
            )
            assert codec.encode_response(completion, False, ctx) == expected


@pytest.mark.parametrize(
    "answer",
    [{"choices": []}, {"choices": None}, {}, {"choices": [{}]}, {"choices": [{"message": {}}]}],
)
def test_answers_without_a_message_encode_as_the_dict_path_does(answer: dict[str, Any]) -> None:
    codec = OpenAIResponsesCodec()
    decoded = codec.decode(body(input="Hi"), {})
    ctx = EncodeContext("req1", 1700000000, "served-model", False, decoded.native_body)
    expected = msgspec.json.encode(encode_decoded(answer, Usage(), response_context(ctx)))
    assert codec.encode_response(json.dumps(answer).encode(), False, ctx) == expected


def _nested(levels: int) -> Any:
    value: Any = "x"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"model": "m", "input": "[{" * 200}).encode(),
        json.dumps({"model": "m", "input": "Hi"}).encode(),
        *(json.dumps({"model": "m", "x": _nested(n)}).encode() for n in (62, 63, 64, 65, 130)),
        json.dumps({"model": "m", "x": [[1]] * 100}).encode(),
        b"[1, 2]",
        b"",
        b'{"model": ',
        b'{"a": "\\ud800"}',
        b"\xff",
    ],
)
def test_json_object_decides_as_the_shared_decoder_and_the_depth_check_do(raw: bytes) -> None:
    # the one-decode path's answers (and errors) are the two-pass path's
    from gateway.ingress.openai_responses import _checked_json_object, json_object

    def outcome(read: Any) -> Any:
        try:
            return read(raw)
        except InvalidRequest as error:
            return (error.message, error.code)

    assert outcome(json_object) == outcome(_checked_json_object)


def test_a_stream_opens_with_the_same_response_in_created_and_in_progress() -> None:
    call = decode(body(input="go", instructions='Say "hi".\n' * 20, stream=True))
    ctx = ResponseContext("resp_o", 1, "m", call.request)
    frames = ResponsesStreamEncoder(ctx).feed(text_chunk("hi"))
    opening = response_body(ctx, [], status="in_progress", usage=None)
    assert frames[:2] == [
        sse_frame({"type": "response.created", "sequence_number": 0, "response": opening}),
        sse_frame({"type": "response.in_progress", "sequence_number": 1, "response": opening}),
    ]
    assert json.loads(frames[2].split(b"data: ", 1)[1])["sequence_number"] == 2
