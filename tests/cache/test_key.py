"""What the response cache treats as the same request: every field that can change the
answer changes the key; fields that only label or route a request do not; tenants, APIs,
planned models and the stream form never share a key."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cache.key import cache_key, request_digest
from gateway.ingress.anthropic_messages import NativeBody
from gateway.pipeline.response_cache import answer_headers
from gateway.wire.apis import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES

BODY: dict[str, Any] = {
    "model": "auto",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.2,
}


def digest(body: dict[str, Any] = BODY, **overrides: Any) -> str:
    args = {"api": OPENAI_CHAT, "tenant": "acme", "model": "gpt-4.1", "stream": False}
    args.update(overrides)
    return request_digest(
        args["api"], args["tenant"], args["model"], args["stream"], body, answer_headers(body)
    )


@pytest.mark.parametrize(
    "changed",
    [
        {"messages": [{"role": "user", "content": "hello"}]},
        {"temperature": 0.3},
        {"max_tokens": 10},
        {"seed": 7},
        {"n": 2},
        {"response_format": {"type": "json_object"}},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"model": "gpt-4.1"},  # the name the answer carries
        {"some_field_we_do_not_model": True},
    ],
)
def test_a_field_that_changes_the_answer_changes_the_key(changed: dict[str, Any]) -> None:
    assert digest({**BODY, **changed}) != digest()


@pytest.mark.parametrize(
    "incidental",
    [
        {"user": "someone"},
        {"metadata": {"trace": "t-1"}},
        {"stream_options": {"include_usage": True}},
        {"store": True},
        {"stream": False},
    ],
)
def test_a_field_that_only_labels_the_request_keeps_the_key(incidental: dict[str, Any]) -> None:
    assert digest({**BODY, **incidental}) == digest()


def test_key_order_does_not_matter_at_any_depth() -> None:
    shuffled = {
        "temperature": 0.2,
        "messages": [{"content": "hi", "role": "user"}],
        "model": "auto",
    }
    assert digest(shuffled) == digest()


def test_tenant_api_model_and_stream_each_make_another_key() -> None:
    keys = {
        digest(),
        digest(tenant="globex"),
        digest(api=OPENAI_RESPONSES),
        digest(model="claude-sonnet-4-5"),
        digest(stream=True),
    }
    assert len(keys) == 5


def test_anthropic_version_and_beta_headers_are_part_of_the_key() -> None:
    def native(headers: dict[str, str]) -> NativeBody:
        return NativeBody(dict(BODY), b"{}", headers)

    plain = digest(native({}), api=ANTHROPIC_MESSAGES)
    beta = digest(
        native({"anthropic-beta": "interleaved-thinking-2025-05-14"}), api=ANTHROPIC_MESSAGES
    )
    assert plain != beta
    assert plain == digest(native({"x-other": "1"}), api=ANTHROPIC_MESSAGES)


def test_the_redis_key_names_the_tenant_and_tags_the_digest() -> None:
    key = cache_key("gw", "acme corp", "ab" * 32)
    assert key == "gw:rc:acme%20corp:{" + "ab" * 32 + "}"
