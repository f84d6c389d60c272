"""The OpenAI Responses API through the real gateway, judged by the official openai SDK:
passthrough to OpenAI, translation to Anthropic and the emulator, streams equal to
whole answers, function tools, conversations across providers, retrieve / delete /
input items, tenant isolation, and Redis killed mid-conversation."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.e2e.responses_setup import (
    ACME_KEY,
    ADMIN_KEY,
    GLOBEX_KEY,
    Upstreams,
    gateway,
    upstreams,
)
from tests.fakes.anthropic_server import tool_message
from tests.fakes.openai_server import Reply
from tests.ingress.support import comparable
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(scope="module")
def up() -> Iterator[Upstreams]:
    with upstreams() as servers:
        yield servers


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(up: Upstreams, redis: RedisServer) -> Iterator[GatewayProcess]:
    with gateway(up, redis) as process:
        yield process


def client(gw: GatewayProcess, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


@pytest.mark.parametrize("model", ["gpt", "claude", "emu-chat"])
def test_a_stream_ends_in_the_same_response_as_the_whole_answer(
    gw: GatewayProcess, model: str
) -> None:
    sdk = client(gw)
    # the emulator's text depends on the prompt, the fakes echo it: one prompt for both
    whole = sdk.responses.create(model=model, input="Say hello to the gateway", store=False)
    with sdk.responses.stream(model=model, input="Say hello to the gateway", store=False) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert whole.output_text and final.output_text == whole.output_text
    assert "".join(deltas) == whole.output_text
    # the served model, as its upstream named it (the client's name is in x-gateway-route)
    served = {"gpt": "gpt-4.1", "claude": "claude-sonnet-4-5", "emu-chat": "emu"}[model]
    assert final.model == whole.model == served
    assert final.usage is not None and whole.usage is not None
    assert final.usage.output_tokens > 0
    assert comparable(final)["output"] == comparable(whole)["output"]


def test_openai_gets_the_clients_body_and_other_upstreams_a_translation(
    gw: GatewayProcess, up: Upstreams
) -> None:
    sdk = client(gw)
    up.openai.requests.clear()
    sdk.responses.create(
        model="gpt", input="hi", instructions="Be brief.", metadata={"team": "a"}, store=False
    )
    sent = up.openai.requests[-1]
    assert sent.path == "/v1/responses"
    assert sent.body["model"] == "gpt-4.1" and sent.body["metadata"] == {"team": "a"}
    answer = sdk.responses.create(
        model="claude", input="hi", instructions="Be brief.", metadata={"team": "a"}
    )
    sent_to_claude = up.anthropic.requests[-1].json
    assert sent_to_claude["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])
    assert answer.metadata == {"team": "a"}
    assert answer.instructions == "Be brief."


def test_a_function_tool_round_trip_through_a_translated_upstream(
    gw: GatewayProcess, up: Upstreams
) -> None:
    sdk = client(gw)
    up.anthropic.enqueue_message(tool_message([("toolu_1", "get_weather", {"city": "Paris"})]))
    first = sdk.responses.create(
        model="claude", input="Weather in Paris?", tools=[WEATHER], tool_choice="auto"
    )
    call = first.output[-1]
    assert call.type == "function_call"
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    second = sdk.responses.create(
        model="claude",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[WEATHER],
    )
    sent = up.anthropic.requests[-1].json["messages"]
    assert sent[0]["role"] == "user"
    assert sent[1]["content"][-1]["type"] == "tool_use"
    assert sent[2]["content"][0]["type"] == "tool_result"
    assert second.previous_response_id == first.id
    assert second.output_text


def test_a_conversation_moves_from_openai_to_anthropic(gw: GatewayProcess, up: Upstreams) -> None:
    sdk = client(gw)
    first = sdk.responses.create(model="gpt", input="My name is Ada.")
    second = sdk.responses.create(
        model="claude", previous_response_id=first.id, input="What is my name?"
    )
    turns = up.anthropic.requests[-1].json["messages"]
    texts = [
        block["text"] if isinstance(block, dict) else block
        for turn in turns
        for block in (turn["content"] if isinstance(turn["content"], list) else [turn["content"]])
    ]
    assert texts == ["My name is Ada.", first.output_text, "What is my name?"]
    assert second.output_text.endswith("What is my name?")
    # and back to OpenAI, which gets the whole conversation as input, not our id
    sdk.responses.create(model="gpt", previous_response_id=second.id, input="Thanks")
    sent = up.openai.requests[-1].body
    assert "previous_response_id" not in sent
    assert len(sent["input"]) == 5


def test_stored_responses_can_be_read_listed_and_deleted(gw: GatewayProcess) -> None:
    sdk = client(gw)
    first = sdk.responses.create(model="claude", input="one")
    second = sdk.responses.create(model="claude", input="two", previous_response_id=first.id)
    fetched = sdk.responses.retrieve(second.id)
    assert fetched.output_text == second.output_text and fetched.id == second.id
    items = sdk.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["message", "message", "message"]
    first_item = items.data[0]
    assert first_item.type == "message" and first_item.content[0].type == "input_text"
    sdk.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model="claude", input="three", previous_response_id=second.id)


def test_a_response_not_stored_cannot_be_continued(gw: GatewayProcess) -> None:
    sdk = client(gw)
    unstored = sdk.responses.create(model="claude", input="secret", store=False)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(unstored.id)


def test_an_unstored_turn_still_continues_a_stored_conversation(
    gw: GatewayProcess, up: Upstreams
) -> None:
    sdk = client(gw)
    first = sdk.responses.create(model="claude", input="My name is Ada.")
    second = sdk.responses.create(
        model="claude", previous_response_id=first.id, input="What is my name?", store=False
    )
    turns = up.anthropic.requests[-1].json["messages"]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert second.previous_response_id == first.id
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(second.id)


def test_another_tenant_gets_404_for_every_use_of_a_response(gw: GatewayProcess) -> None:
    mine = client(gw).responses.create(model="claude", input="private")
    theirs = client(gw, GLOBEX_KEY)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.create(model="claude", input="x", previous_response_id=mine.id)
    assert client(gw).responses.retrieve(mine.id).id == mine.id


def test_web_search_becomes_anthropics_own_and_is_dropped_where_none_exists(
    gw: GatewayProcess, up: Upstreams
) -> None:
    sdk = client(gw)
    on_claude = sdk.responses.with_raw_response.create(
        model="claude", input="news?", tools=[{"type": "web_search_preview"}]
    )
    sent = up.anthropic.requests[-1].json
    assert {"type": "web_search_20250305", "name": "web_search"} in sent["tools"]
    assert (
        "mapped-tool:web_search_preview->web_search_20250305"
        in on_claude.headers["x-gateway-route"]
    )
    on_emulator = sdk.responses.with_raw_response.create(
        model="emu-chat", input="news?", tools=[{"type": "web_search_preview"}]
    )
    assert on_emulator.parse().output_text
    assert "dropped-tool:web_search_preview" in on_emulator.headers["x-gateway-route"]


def test_continued_conversations_are_metered_and_priced_with_their_history(
    gw: GatewayProcess,
) -> None:
    sdk = client(gw)
    first = sdk.responses.with_raw_response.create(model="claude", input="count me")
    parsed = first.parse()
    follow = sdk.responses.with_raw_response.create(
        model="claude", input="and me", previous_response_id=parsed.id
    )
    assert float(follow.headers["x-gateway-cost-usd"]) > 0
    assert follow.headers["x-gateway-store"] == "stored"
    # the fake bills the whole conversation, so the follow-up reads more input tokens
    usage_first = parsed.usage
    usage_follow = follow.parse().usage
    assert usage_first is not None and usage_follow is not None
    assert usage_follow.input_tokens > usage_first.input_tokens
    spend = httpx.get(
        gw.url + "/admin/spend",
        params={"tenant": "acme", "group_by": "model"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    ).json()
    assert "claude" in json.dumps(spend)


def test_redis_killed_mid_conversation(up: Upstreams) -> None:
    """A continuation needs the store: a clear 503. A new response does not: served,
    its record skipped, as the header says."""
    server = RedisServer()
    server.start()
    try:
        with gateway(up, server) as process:
            sdk = client(process)
            first = sdk.responses.create(model="claude", input="remember this")
            server.stop(kill=True)
            with pytest.raises(openai.InternalServerError) as raised:
                sdk.responses.create(model="claude", input="and?", previous_response_id=first.id)
            assert raised.value.status_code == 503
            fresh = sdk.responses.with_raw_response.create(model="claude", input="new topic")
            assert fresh.status_code == 200
            assert fresh.headers["x-gateway-store"] == "skipped; store unavailable"
            assert fresh.parse().output_text
    finally:
        server.stop()


def test_responses_without_redis_keep_conversations_in_memory(up: Upstreams) -> None:
    with gateway(up, None) as process:
        sdk = client(process)
        first = sdk.responses.create(model="emu-chat", input="hello")
        second = sdk.responses.create(model="gpt", input="again", previous_response_id=first.id)
        assert sdk.responses.retrieve(second.id).previous_response_id == first.id


def test_openai_stream_passthrough_is_stored_and_continued(gw: GatewayProcess) -> None:
    sdk = client(gw)
    with sdk.responses.stream(model="gpt", input="stream me") as stream:
        final = stream.get_final_response()
    assert final.model == "gpt-4.1"
    follow = sdk.responses.create(model="claude", input="next", previous_response_id=final.id)
    assert follow.previous_response_id == final.id


def test_a_scripted_openai_function_call_streams_through(gw: GatewayProcess, up: Upstreams) -> None:
    up.openai.enqueue(Reply(tool_call={"name": "get_weather", "arguments": '{"city": "Rome"}'}))
    with client(gw).responses.stream(model="gpt", input="weather?", tools=[WEATHER]) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "function_call"
    assert final.output[0].arguments == '{"city": "Rome"}'
