"""Deterministic replies: length, limits, stop sequences and forced tool calls."""

from __future__ import annotations

import json

import jsonschema

from gateway.emulator.generation import ReplyRequest, ReplyWriter
from gateway.wire.openai import FunctionDefinition, NamedFunction, NamedToolChoice, Tool

LOOKUP = Tool(
    function=FunctionDefinition(
        name="lookup",
        parameters={
            "type": "object",
            "properties": {
                "sku": {"type": "string"},
                "count": {"type": "integer"},
                "filters": {
                    "type": "object",
                    "properties": {"in_stock": {"type": "boolean"}},
                    "required": ["in_stock"],
                },
                "note": {"type": "string"},
            },
            "required": ["sku", "count", "filters"],
        },
    )
)


def test_replies_depend_only_on_seed_and_prompt() -> None:
    writer = ReplyWriter(seed=7, min_tokens=16, max_tokens=256)
    first = writer.reply(ReplyRequest(prompt="hello"))
    assert first == ReplyWriter(seed=7, min_tokens=16, max_tokens=256).reply(
        ReplyRequest(prompt="hello")
    )
    assert first != ReplyWriter(seed=8, min_tokens=16, max_tokens=256).reply(
        ReplyRequest(prompt="hello")
    )
    assert 16 <= first.tokens <= 256
    assert first.finish_reason == "stop"


def test_a_token_limit_below_the_natural_length_ends_with_length() -> None:
    writer = ReplyWriter(seed=0, min_tokens=50, max_tokens=60)
    reply = writer.reply(ReplyRequest(prompt="p", limit=10))
    assert (reply.tokens, reply.finish_reason) == (10, "length")
    roomy = writer.reply(ReplyRequest(prompt="p", limit=1000))
    assert roomy.finish_reason == "stop" and roomy.tokens <= 60
    forced = writer.reply(ReplyRequest(prompt="p", limit=1000, ignore_eos=True))
    assert (forced.tokens, forced.finish_reason) == (1000, "length")


def test_a_stop_sequence_cuts_the_text_before_it() -> None:
    writer = ReplyWriter(seed=0, min_tokens=200, max_tokens=200)
    full = writer.reply(ReplyRequest(prompt="p"))
    word = full.pieces[5].strip()
    cut = writer.reply(ReplyRequest(prompt="p", stop=[word]))
    assert cut.finish_reason == "stop"
    assert word not in cut.text
    assert full.text.startswith(cut.text)
    assert cut.tokens <= 6


def test_a_required_tool_choice_builds_arguments_valid_under_the_schema() -> None:
    writer = ReplyWriter(seed=0, min_tokens=16, max_tokens=16)
    reply = writer.reply(ReplyRequest(prompt="p", tools=[LOOKUP], tool_choice="required"))
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_call is not None and reply.tool_call.name == "lookup"
    arguments = json.loads(reply.tool_call.arguments)
    jsonschema.validate(arguments, LOOKUP.function.parameters)
    assert {"sku", "count", "filters"} <= set(arguments)
    assert "".join(reply.pieces) == reply.tool_call.arguments


def test_a_named_tool_choice_picks_that_tool() -> None:
    writer = ReplyWriter(seed=0, min_tokens=16, max_tokens=16)
    other = Tool(function=FunctionDefinition(name="other"))
    named = NamedToolChoice(function=NamedFunction(name="other"))
    reply = writer.reply(ReplyRequest(prompt="p", tools=[LOOKUP, other], tool_choice=named))
    assert reply.tool_call is not None and reply.tool_call.arguments == "{}"
    assert reply.tool_call.name == "other"


def test_auto_calls_the_tool_the_user_asks_for_and_answers_after_its_result() -> None:
    writer = ReplyWriter(seed=0, min_tokens=16, max_tokens=16)
    other = Tool(function=FunctionDefinition(name="send_email", description="Send an email"))
    asked = ReplyRequest(prompt="p", tools=[other, LOOKUP], last_text="Please lookup sku 7")
    call = writer.reply(asked).tool_call
    assert call is not None and call.name == "lookup"
    chat = writer.reply(ReplyRequest(prompt="p", tools=[LOOKUP], last_text="Just talk."))
    assert chat.tool_call is None and chat.finish_reason == "stop"
    after = ReplyRequest(prompt="p2", tools=[LOOKUP], last_role="tool", last_text="lookup: 3")
    assert writer.reply(after).tool_call is None
    none = ReplyRequest(prompt="p", tools=[LOOKUP], tool_choice="none", last_text="lookup 7")
    assert writer.reply(none).tool_call is None
