"""The pieces the Anthropic and Gemini translations share: request-part readers, the
OpenAI bodies they write (checked against the openai SDK's types), and error wording."""

from __future__ import annotations

import json

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.errors import InvalidRequest, UpstreamMisconfigured
from gateway.providers.openai_out import (
    ChunkWriter,
    arguments_object,
    assistant_texts,
    completion_body,
    credentials_refused,
    parse_data_url,
    redact,
    unreadable,
)
from gateway.usage import Usage
from gateway.wire import openai
from tests.providers.support import ANTHROPIC_KEY, anthropic_target, make_call


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("data:image/png;base64,iVBORw0KGgo=", ("image/png", "iVBORw0KGgo=")),
        ("data:IMAGE/JPEG;name=a.jpg;base64,/9j/4A==", ("image/jpeg", "/9j/4A==")),
        ("data:application/pdf;base64,", ("application/pdf", "")),
        ("data:text/plain,hello", None),  # not base64
        ("data:image/png;base64", None),  # no comma
        ("https://example.com/cat.png", None),
    ],
)
def test_data_urls_parse_to_media_type_and_base64_data(
    url: str, parsed: tuple[str, str] | None
) -> None:
    assert parse_data_url(url) == parsed


def test_tool_arguments_must_be_a_json_object() -> None:
    assert arguments_object('{"city": "Paris"}', "p") == {"city": "Paris"}
    assert arguments_object("  ", "p") == {}
    for bad in ("[1, 2]", "not json", '"text"'):
        with pytest.raises(InvalidRequest) as caught:
            arguments_object(bad, "messages[1].tool_calls[0].function.arguments")
        assert caught.value.param == "messages[1].tool_calls[0].function.arguments"


def test_assistant_texts_read_strings_text_and_refusal_parts() -> None:
    parts: list[openai.ContentPart] = [
        openai.TextPart("a"),
        openai.RefusalPart("no"),
        openai.TextPart(""),
    ]
    assert assistant_texts(openai.Message(role="assistant", content=parts)) == ["a", "no", ""]
    assert assistant_texts(openai.Message(role="assistant", content="hi")) == ["hi"]
    assert assistant_texts(openai.Message(role="assistant")) == []


def test_completion_body_is_an_sdk_chat_completion_with_every_required_field() -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}]}, request_id="r1")
    tool_call = openai.ToolCall("call_1", openai.FunctionCall("f", "{}"))
    choice = openai.Choice(
        index=0,
        message=openai.ResponseMessage(content=None, tool_calls=[tool_call]),
        finish_reason="tool_calls",
    )
    usage = Usage(input_tokens=3, output_tokens=2)
    body = json.loads(completion_body(call, [choice], usage, "served-model"))
    ChatCompletion.model_validate(body)
    assert body["object"] == "chat.completion"
    assert body["id"] == "chatcmpl-r1" and body["model"] == "served-model"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"] is None
    assert message["tool_calls"][0]["type"] == "function"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_chunk_writer_chunks_share_id_and_model_and_end_with_usage() -> None:
    writer = ChunkWriter(make_call({"messages": [{"role": "user", "content": "hi"}]}), "served")
    payloads = [
        writer.delta(openai.Delta(role="assistant", content="")),
        writer.delta(openai.Delta(content="x"), index=1),
        writer.delta(openai.Delta(), "stop"),
        writer.usage(None),
    ]
    chunks = [json.loads(p) for p in payloads]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        assert chunk["object"] == "chat.completion.chunk"
    assert {(c["id"], c["model"], c["created"]) for c in chunks} == {
        ("chatcmpl-req1", "served", 1_700_000_000)
    }
    assert [c["choices"][0]["index"] for c in chunks[:3]] == [0, 1, 0]
    assert chunks[2]["choices"][0]["finish_reason"] == "stop"
    assert "usage" not in chunks[0]
    assert chunks[3]["choices"] == []
    assert chunks[3]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_redaction_removes_the_providers_key_only() -> None:
    target = anthropic_target()
    assert redact(f"key {ANTHROPIC_KEY} is bad", target) == "key [redacted] is bad"
    assert redact("nothing secret", target) == "nothing secret"


def test_refused_credentials_name_the_config_entry_never_the_key() -> None:
    error = credentials_refused("Anthropic", anthropic_target(), "401: nope", 401, "ANTHROPIC_KEY")
    assert isinstance(error, UpstreamMisconfigured)
    assert error.status == 502 and error.upstream_status == 401
    assert "`providers.claude-prod.api_key`" in error.message
    assert ANTHROPIC_KEY not in error.message


def test_an_unreadable_answer_is_not_retried() -> None:
    error = unreadable(anthropic_target(), "a body that is not JSON")
    assert error.retryable is False
    assert error.message == "provider 'claude-prod' returned a body that is not JSON"
