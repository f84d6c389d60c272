"""The project's own fuzz suite, part 3: upstream replies. Random bodies and random SSE
streams through every provider translation (OpenAI-compatible, Anthropic, Gemini) may
only produce an answer or an UpstreamError (a 502 naming the provider); and through a
live gateway in front of an upstream that answers them, the client only ever sees a 200
or a shaped 502 that names the provider, never a 500, never the upstream's key, and the
gateway serves normally afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from gateway.errors import UpstreamError
from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.base import Target, Translation
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.openai_compatible import OpenAICompatible
from gateway.providers.sse import SSEParser
from gateway.settings.server import ProviderSettings
from tests.fuzz.raw_upstream import VALID_COMPLETION, RawReply, RawUpstream, sse, valid_chunk
from tests.providers.support import anthropic_target, gemini_target, make_call, split_bytes
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

UPSTREAM_KEY = "sk-upstream-RAWFUZZ-SECRET-31f"
KEY = "gw-test-key-upstream-fuzz"
UNIT = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
LIVE = settings(
    max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


def openai_target() -> Target:
    provider = ProviderSettings(kind="openai", api_key=SecretStr(UPSTREAM_KEY))
    return Target("raw", provider, "upstream-model", "http://upstream.test/v1")


TRANSLATIONS: list[tuple[str, Translation, Target]] = [
    ("openai", OpenAICompatible(), openai_target()),
    ("anthropic", AnthropicTranslation(), anthropic_target()),
    ("gemini", GeminiTranslation(), gemini_target()),
]
IDS = [name for name, _, _ in TRANSLATIONS]

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)
# the keys real answers use, so the generated objects get past the first checks
known_keys = st.sampled_from(
    ["choices", "usage", "prompt_tokens", "completion_tokens", "content", "type", "message",
     "delta", "index", "candidates", "usageMetadata", "promptTokenCount", "error", "text",
     "input_tokens", "output_tokens", "stop_reason", "parts", "finishReason"]
)  # fmt: skip
answer_like = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(known_keys, inner, max_size=5),
    max_leaves=30,
)
bodies = (
    st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | answer_like.map(lambda v: json.dumps(v).encode())
)


@pytest.mark.parametrize(("name", "translation", "target"), TRANSLATIONS, ids=IDS)
@UNIT
@given(body=bodies)
def test_any_upstream_body_is_an_answer_or_an_upstream_error(
    name: str, translation: Translation, target: Target, body: bytes
) -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}]})
    try:
        translated = translation.parse_response(body, call, target)
    except UpstreamError as error:
        assert error.status == 502 and target.provider in error.message
    else:
        assert isinstance(json.loads(translated.body), dict)
        assert translated.usage.input_tokens >= 0 and translated.usage.output_tokens >= 0


sse_events = st.lists(
    bodies | st.sampled_from([b"[DONE]", b"", b":", b"event: error"]), min_size=1, max_size=6
)


@pytest.mark.parametrize(("name", "translation", "target"), TRANSLATIONS, ids=IDS)
@UNIT
@given(events=sse_events, cuts=st.lists(st.integers(0, 2000), max_size=5))
def test_any_upstream_stream_yields_chunks_or_an_upstream_error(
    name: str, translation: Translation, target: Target, events: list[bytes], cuts: list[int]
) -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})
    stream = translation.stream(call, target)
    wire = b"".join(b"data: " + e.replace(b"\n", b" ") + b"\n\n" for e in events)
    parser = SSEParser()
    try:
        for read in split_bytes(wire, cuts):
            for event in parser.feed(read):
                stream.feed(event)
        for event in parser.flush():
            stream.feed(event)
        stream.finish()
    except UpstreamError as error:
        assert error.status in (400, 401, 402, 403, 404, 413, 429, 500, 502, 503, 504, 529)
    assert stream.usage is None or stream.usage.input_tokens >= 0


# -- the same through a live gateway ------------------------------------------------


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def live_gateway(raw: RawUpstream) -> Iterator[GatewayProcess]:
    config = {
        "providers": {
            "raw": openai_provider(
                raw.base_url,
                retry={"max_attempts": 1},
                breaker={"failure_threshold": 100_000, "min_requests": 100_000},
            )
        }
    }
    policy = {
        "models": {
            "raw-model": {
                "deployments": [{"provider": "raw", "upstream_model": "upstream-raw"}],
                "prices": {"input": 1.0, "output": 2.0},
            }
        },
        "tenants": {"acme": {"keys": [{"id": "fuzz", "hash": key_hash(KEY)}]}},
    }
    with GatewayProcess(config, policy, env={"FAKE_UPSTREAM_KEY": UPSTREAM_KEY}) as process:
        yield process


def ask(gateway: GatewayProcess, stream: bool) -> httpx.Response:
    body = {"model": "raw-model", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return httpx.post(
        gateway.base_url + "/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )


def assert_owned(response: httpx.Response) -> None:
    assert response.status_code in (200, 502), response.text
    assert UPSTREAM_KEY not in response.text
    if response.status_code == 502:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert "'raw'" in error["message"]
    elif response.headers["content-type"].startswith("text/event-stream"):
        lines = [line for line in response.text.splitlines() if line]
        assert lines[-1] == "data: [DONE]"


def test_random_upstream_bodies_through_a_live_gateway(
    live_gateway: GatewayProcess, raw: RawUpstream
) -> None:
    @LIVE
    @given(body=bodies | st.just(json.dumps({"usage": {"prompt_tokens": "many"}}).encode()))
    def run(body: bytes) -> None:
        raw.clear()
        raw.answer(body)
        assert_owned(ask(live_gateway, stream=False))

    run()
    raw.clear()
    assert ask(live_gateway, stream=False).json()["choices"] == VALID_COMPLETION["choices"]


def test_random_upstream_streams_through_a_live_gateway(
    live_gateway: GatewayProcess, raw: RawUpstream
) -> None:
    first = json.dumps(valid_chunk("first")).encode()

    @LIVE
    @given(events=sse_events)
    def run(events: list[bytes]) -> None:
        raw.clear()
        frames = [b"data: " + e.replace(b"\n", b" ") + b"\n\n" for e in [first, *events]]
        raw.enqueue(RawReply(200, tuple(frames), "text/event-stream"))
        assert_owned(ask(live_gateway, stream=True))

    run()
    raw.clear()
    response = ask(live_gateway, stream=True)
    assert response.status_code == 200 and "fine" in response.text


def test_a_chunk_no_encoder_can_write_ends_the_stream_with_an_error_event(
    live_gateway: GatewayProcess, raw: RawUpstream
) -> None:
    """A chunk the client's API cannot be written from (a tool call without an index, for
    the Responses encoder) ends the stream as an upstream error does, in the client's API,
    instead of cutting the connection; the gateway serves on."""
    unwritable = {
        "object": "chat.completion.chunk",
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": None, "function": {"name": "f"}}]}}
        ],
    }
    raw.clear()
    raw.enqueue(RawReply(200, tuple(sse(valid_chunk("first"), unwritable)), "text/event-stream"))
    client = openai.OpenAI(base_url=live_gateway.base_url, api_key=KEY, max_retries=0)
    events = list(client.responses.create(model="raw-model", input="hi", stream=True))
    assert [event.type for event in events][-2:] == ["error", "response.failed"]
    error = events[-2]
    assert error.type == "error" and "could not" in error.message
    assert UPSTREAM_KEY not in error.message
    raw.clear()
    assert "fine" in ask(live_gateway, stream=True).text
