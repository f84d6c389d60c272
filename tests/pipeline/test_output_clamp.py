"""A client's output cap above the served model's maximum output: every field naming
it is clamped (internal request, chat body, the client's own body and its bytes), and
the change is worded for x-gateway-route."""

from __future__ import annotations

import dataclasses
import json

from gateway.ingress.anthropic_messages import AnthropicMessagesCodec, NativeBody
from gateway.pipeline.output_clamp import clamp_output
from gateway.providers.base import Call
from gateway.wire.apis import ANTHROPIC_MESSAGES
from tests.providers.support import make_call


def anthropic_call(max_tokens: int) -> Call:
    body = {
        "model": "deepseek",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "x"}],
    }
    decoded = AnthropicMessagesCodec().decode(json.dumps(body).encode(), {})
    return Call(
        decoded.request,
        decoded.chat_body,
        "deepseek",
        "r1",
        1,
        api=ANTHROPIC_MESSAGES,
        native=decoded.native_body,
    )


def test_a_cap_above_the_maximum_is_clamped_everywhere_and_said_so() -> None:
    call = anthropic_call(32_000)
    clamped, change = clamp_output(call, 8_192)
    assert change == "max_tokens:32000->8192"
    assert clamped.request.output_limit == 8_192
    assert clamped.raw["max_tokens"] == 8_192
    native = clamped.native
    assert isinstance(native, NativeBody) and native["max_tokens"] == 8_192
    assert json.loads(native.raw)["max_tokens"] == 8_192
    # the client's own call is left as it came (a fallback model may allow more)
    assert call.request.output_limit == 32_000 and call.raw["max_tokens"] == 32_000


def test_a_cap_within_the_maximum_or_none_leaves_the_call_alone() -> None:
    call = anthropic_call(1_000)
    assert clamp_output(call, 8_192) == (call, None)
    plain = make_call({"messages": [{"role": "user", "content": "x"}]})
    assert clamp_output(plain, 8_192) == (plain, None)


def test_max_completion_tokens_is_named_as_the_client_sent_it() -> None:
    call = make_call(
        {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9_000}
    )
    call = dataclasses.replace(call, native=call.raw)
    clamped, change = clamp_output(call, 4_096)
    assert change == "max_completion_tokens:9000->4096"
    assert clamped.request.max_completion_tokens == 4_096
