"""Same-API passthrough (Anthropic Messages in, Anthropic out): the client's bytes go
up with only the model name changed, the answer comes back as it came (named by the
served model), and usage (cache writes split by lifetime) is read from it."""

from __future__ import annotations

import json

import pytest
from anthropic import types as at

from gateway.errors import UpstreamRejected
from gateway.ingress.anthropic_messages import AnthropicMessagesCodec
from gateway.providers import anthropic_native as native
from gateway.providers.base import Call
from gateway.providers.sse import SSEParser
from gateway.wire.apis import ANTHROPIC_MESSAGES
from tests.fakes.anthropic_server import events_to_sse, make_message, message_events
from tests.providers.support import ANTHROPIC_KEY, anthropic_target

THINKING_TURN = (
    b'{"model": "sonnet", "max_tokens": 2048,\n "thinking": {"type": "enabled", '
    b'"budget_tokens": 1024},\n "system": [{"type": "text", "text": "Be brief.", '
    b'"cache_control": {"type": "ephemeral", "ttl": "1h"}}],\n "messages": [{"role": "user", '
    b'"content": "2+2?"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": '
    b'"Adding.", "signature": "EqQBCgIYAhIM+/9\\u00e9sig=="}, {"type": "redacted_thinking", '
    b'"data": "EmwKAhgBEgy3va"}, {"type": "text", "text": "4"}]}, {"role": "user", '
    b'"content": "and 3+3?"}], "top_k": 5, "x_future_field": [1, 2.50]}'
)


def test_only_the_model_name_changes_in_the_forwarded_bytes() -> None:
    out = native.replace_model(THINKING_TURN, "sonnet", "claude-sonnet-4-5-20250929")
    assert out == THINKING_TURN.replace(b'"sonnet"', b'"claude-sonnet-4-5-20250929"')
    assert native.replace_model(THINKING_TURN, "sonnet", "sonnet") is THINKING_TURN


def test_a_model_key_deeper_in_the_body_falls_back_to_re_encoding_the_top_level() -> None:
    body = (
        b'{"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",'
        b' "content": "{\\"model\\": 1}"}]}], "tools": [{"name": "f", "input_schema": '
        b'{"properties": {"model": {"type": "string"}}}}], "model": "sonnet"}'
    )
    out = json.loads(native.replace_model(body, "sonnet", "claude-x"))
    assert out["model"] == "claude-x"
    assert out["tools"][0]["input_schema"]["properties"] == {"model": {"type": "string"}}


def test_headers_carry_the_providers_key_and_only_allowed_betas() -> None:
    target = anthropic_target(anthropic_betas=["interleaved-thinking-2025-05-14"])
    headers = native.forward_headers(
        {
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "interleaved-thinking-2025-05-14, files-api-2025-04-14",
            "x-api-key": "gateway-client-key",
            "authorization": "Bearer gateway-client-key",
        },
        target,
    )
    assert headers["x-api-key"] == ANTHROPIC_KEY
    assert headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert "authorization" not in headers
    assert "gateway-client-key" not in str(headers)
    assert "anthropic-beta" not in native.forward_headers({"anthropic-beta": "x"}, target)


@pytest.mark.parametrize("beta", [None, "", " , "])
def test_a_request_without_betas_forwards_none_and_drops_none(beta: str | None) -> None:
    target = anthropic_target(anthropic_betas_denied=["files-api-2025-04-14"])
    client = {"anthropic-version": "2023-06-01"}
    if beta is not None:
        client["anthropic-beta"] = beta
    request = native.build_request(THINKING_TURN, client, "sonnet", target, stream=False)
    assert "anthropic-beta" not in request.headers
    assert request.changes == []
    assert native.split_betas(beta or "", target) == ([], [])


def test_an_answer_keeps_its_bytes_and_reports_exact_usage() -> None:
    answer = make_message(
        [
            at.ThinkingBlock(type="thinking", thinking="Adding.", signature="sig+/=="),
            at.TextBlock(type="text", text="6"),
        ],
        stop_reason="end_turn",
        usage=at.Usage.model_validate(
            {
                "input_tokens": 12,
                "output_tokens": 40,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 300,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 100,
                    "ephemeral_1h_input_tokens": 200,
                },
            }
        ),
        model="claude-sonnet-4-5-20250929",
    )
    body = answer.model_dump_json().encode()
    out, usage = native.read_message(body, anthropic_target())
    assert out == body
    assert (usage.input_tokens, usage.cached_input_tokens) == (1312, 1000)
    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens) == (300, 200)
    assert usage.output_tokens == 40


def test_stream_events_pass_through_as_they_came_with_usage_merged() -> None:
    answer = make_message(
        [
            at.ThinkingBlock(type="thinking", thinking="Let me think", signature="S1g/+=="),
            at.TextBlock(type="text", text="Hello there"),
        ],
        stop_reason="end_turn",
        usage=at.Usage(input_tokens=7, output_tokens=20, cache_read_input_tokens=50),
        model="claude-sonnet-4-5-20250929",
    )
    frames = events_to_sse(message_events(answer, pings=[2]))
    stream = native.NativeStream(anthropic_target())
    parser = SSEParser()
    out = [data for raw in frames for event in parser.feed(raw) for data in stream.feed(event)]
    sent = [raw.split(b"data: ", 1)[1].rstrip(b"\n") for raw in frames]
    # every event is forwarded as it came, message_start naming the served model
    assert out == sent
    assert b'"claude-sonnet-4-5-20250929"' in out[0]
    assert stream.usage is not None
    assert (stream.usage.input_tokens, stream.usage.output_tokens) == (57, 20)
    assert stream.usage.cached_input_tokens == 50


def test_an_error_event_raises_with_anthropics_type() -> None:
    stream = native.NativeStream(anthropic_target())
    event = SSEParser().feed(
        b'event: error\ndata: {"type": "error", "error": {"type": "rate_limit_error", '
        b'"message": "slow down"}}\n\n'
    )[0]
    with pytest.raises(UpstreamRejected) as caught:
        stream.feed(event)
    assert caught.value.status == 429
    assert caught.value.code == "rate_limit_error"


def test_unsigned_thinking_from_a_translated_turn_is_dropped_signed_thinking_kept() -> None:
    body = json.dumps(
        {
            "model": "sonnet",
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "from gemini", "signature": ""},
                        {"type": "thinking", "thinking": "from claude", "signature": "sig"},
                        {"type": "text", "text": "hello"},
                    ],
                },
                {"role": "user", "content": "again"},
            ],
        }
    ).encode()
    sent = json.loads(native.without_unsigned_thinking(body))
    assert sent["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "from claude", "signature": "sig"},
        {"type": "text", "text": "hello"},
    ]
    assert native.without_unsigned_thinking(THINKING_TURN) is THINKING_TURN


def forwarded(body: bytes) -> bytes:
    """The bytes the passthrough sends Anthropic for a client's Messages body."""
    decoded = AnthropicMessagesCodec().decode(body, {"anthropic-version": "2023-06-01"})
    call = Call(
        decoded.request,
        decoded.chat_body,
        "sonnet",
        "req1",
        1_700_000_000,
        api=ANTHROPIC_MESSAGES,
        native=decoded.native_body,
    )
    return native.AnthropicNativeTranslation().build_request(call, anthropic_target()).body


def as_it_came(body: bytes) -> bytes:
    """`body` with only its model changed, to the target's."""
    return native.replace_model(body, "sonnet", anthropic_target().upstream_model)


@pytest.mark.parametrize(
    ("signature", "kept"),
    [("", False), (None, False), ("sig", True)],
)
def test_the_passthrough_drops_unsigned_thinking_only_where_the_marker_is(
    signature: str | None, kept: bool
) -> None:
    block = {"type": "thinking", "thinking": "from gemini", "signature": signature}
    body = json.dumps(
        {
            "model": "sonnet",
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [block, {"type": "text", "text": "hello"}]},
                {"role": "user", "content": "again"},
            ],
        }
    ).encode()
    sent = forwarded(body)
    # a null signature has no `"signature":""` in the bytes: forwarded as it came, as ever
    assert (sent == as_it_came(body)) is (kept or signature is None)
    assert (block in json.loads(sent)["messages"][1]["content"]) is (kept or signature is None)
    assert forwarded(THINKING_TURN) == as_it_came(THINKING_TURN)


def test_an_abandoned_stream_keeps_the_text_its_usage_does_not_count_yet() -> None:
    answer = make_message(
        [
            at.ThinkingBlock(type="thinking", thinking="Let me think", signature="S1g/+=="),
            at.TextBlock(type="text", text="Hello there, gateway"),
        ],
        stop_reason="end_turn",
        usage=at.Usage(input_tokens=7, output_tokens=20),
    )
    events = message_events(answer)
    closing = next(i for i, e in enumerate(events) if e["type"] == "message_delta")
    stream = native.NativeStream(anthropic_target())
    parser = SSEParser()
    for raw in events_to_sse(events[:closing]):
        for event in parser.feed(raw):
            stream.feed(event)
    # message_start counted 1 output token; the text streamed since is what it missed
    assert stream.usage is not None and stream.usage.output_tokens == 1
    assert stream.unreported_text == "Let me thinkHello there, gateway"
    for raw in events_to_sse(events[closing:]):
        for event in parser.feed(raw):
            stream.feed(event)
    assert stream.unreported_text is None
    assert stream.usage.output_tokens == 20
