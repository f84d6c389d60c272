"""POST /v1/embeddings and GET /v1/models/{id} through the real gateway, judged by the
official openai SDK: single and batched inputs (batches past the provider's cap split
and rejoined in order), base64, dimensions, for OpenAI, Gemini and the emulator;
routed, metered and priced; models looked up as the key may see them."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.emulator.embeddings import embed
from tests.e2e.responses_setup import (
    ACME_KEY,
    BREAKER_OFF,
    GEMINI_EMBED_CAP,
    NARROW_KEY,
    OPENAI_EMBED_CAP,
    Upstreams,
    gateway,
    upstreams,
)
from tests.fakes.openai_server import OpenAIFake, fake_vector
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider


@pytest.fixture(scope="module")
def up() -> Iterator[Upstreams]:
    with upstreams() as servers:
        yield servers


@pytest.fixture(scope="module")
def gw(up: Upstreams) -> Iterator[GatewayProcess]:
    with gateway(up, None) as process:
        yield process


def client(gw: GatewayProcess, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


# the served model each answer names (as its upstream named it, else its deployment's id)
SERVED = {
    "oa-embed": "text-embedding-3-small",
    "gem-embed": "gemini-embedding-001",
    "emu-embed": "emu",
}


def expected(model: str, text: str, dimensions: int) -> list[float]:
    if model == "emu-embed":
        return embed(text, dimensions)
    return fake_vector(text, dimensions)


@pytest.mark.parametrize("model", ["oa-embed", "gem-embed", "emu-embed"])
def test_one_input_embeds_with_the_requested_dimensions(gw: GatewayProcess, model: str) -> None:
    response = client(gw).embeddings.create(model=model, input="hello", dimensions=16)
    assert response.model == SERVED[model]
    assert len(response.data) == 1
    assert response.data[0].embedding == pytest.approx(expected(model, "hello", 16), rel=1e-6)
    assert response.usage.prompt_tokens > 0


@pytest.mark.parametrize(
    ("model", "cap"), [("oa-embed", OPENAI_EMBED_CAP), ("gem-embed", GEMINI_EMBED_CAP)]
)
def test_a_batch_past_the_providers_cap_is_split_and_rejoined_in_order(
    gw: GatewayProcess, up: Upstreams, model: str, cap: int
) -> None:
    fake = up.openai if model == "oa-embed" else up.gemini
    before = len(fake.requests)
    texts = [f"text number {i}" for i in range(cap * 2 + 1)]
    response = client(gw).embeddings.create(model=model, input=texts, dimensions=8)
    assert [d.index for d in response.data] == list(range(len(texts)))
    for item, text in zip(response.data, texts, strict=True):
        assert item.embedding == pytest.approx(expected(model, text, 8), rel=1e-6)
    assert len(fake.requests) - before == 3
    if model == "oa-embed":
        # the SDK asked for base64 (its default): so was the upstream, and its text passed on
        asked = {r.body["encoding_format"] for r in fake.requests[before:]}
        assert asked == {"base64"}


def test_base64_is_little_endian_float32_and_floats_are_floats(gw: GatewayProcess) -> None:
    raw = httpx.post(
        gw.base_url + "/embeddings",
        json={
            "model": "emu-embed",
            "input": ["a", "b"],
            "encoding_format": "base64",
            "dimensions": 4,
        },
        headers={"authorization": f"Bearer {ACME_KEY}"},
    )
    assert raw.status_code == 200
    data = raw.json()["data"]
    decoded = [list(struct.unpack("<4f", base64.b64decode(d["embedding"]))) for d in data]
    assert decoded[1] == pytest.approx(embed("b", 4), rel=1e-6)
    floats = client(gw).embeddings.create(
        model="emu-embed", input=["a"], dimensions=4, encoding_format="float"
    )
    assert floats.data[0].embedding == pytest.approx(embed("a", 4), rel=1e-6)


def test_token_ids_embed_on_openai_compatible_upstreams_and_are_refused_by_gemini(
    gw: GatewayProcess,
) -> None:
    sdk = client(gw)
    assert len(sdk.embeddings.create(model="emu-embed", input=[[1, 2, 3], [4]]).data) == 2
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.embeddings.create(model="gem-embed", input=[[1, 2, 3]])
    assert "token ids" in str(raised.value)


def test_a_route_of_embedding_models_serves_and_says_what_served(gw: GatewayProcess) -> None:
    raw = client(gw).embeddings.with_raw_response.create(model="embed", input="routed")
    assert raw.headers["x-gateway-model"] == "oa-embed"
    assert float(raw.headers["x-gateway-cost-usd"]) > 0
    assert raw.parse().model == SERVED["oa-embed"]


def test_the_wrong_kind_of_model_is_a_400_naming_the_endpoint(gw: GatewayProcess) -> None:
    sdk = client(gw)
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.embeddings.create(model="claude", input="x")
    assert "embedding model" in str(raised.value)
    with pytest.raises(openai.BadRequestError) as chat_raised:
        sdk.chat.completions.create(model="oa-embed", messages=[{"role": "user", "content": "x"}])
    assert "/v1/embeddings" in str(chat_raised.value)
    with pytest.raises(openai.BadRequestError):
        sdk.embeddings.create(model="oa-embed", input=[])


def test_models_retrieve_for_what_the_key_may_use_and_404_otherwise(gw: GatewayProcess) -> None:
    sdk = client(gw)
    assert sdk.models.retrieve("gpt").id == "gpt"
    assert sdk.models.retrieve("embed").owned_by == "gateway"
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("no-such-model")
    narrow = client(gw, NARROW_KEY)
    assert narrow.models.retrieve("gpt").id == "gpt"
    with pytest.raises(openai.NotFoundError):
        narrow.models.retrieve("claude")
    head = httpx.head(gw.base_url + "/models/gpt", headers={"authorization": f"Bearer {ACME_KEY}"})
    assert head.status_code == 200 and head.content == b""
    missing = httpx.head(
        gw.base_url + "/models/nope", headers={"authorization": f"Bearer {ACME_KEY}"}
    )
    assert missing.status_code == 404
    with pytest.raises(openai.AuthenticationError):
        client(gw, "wrong-key").models.retrieve("gpt")


@pytest.fixture(scope="module")
def old_vllm() -> Iterator[OpenAIFake]:
    with OpenAIFake(dialect="compatible", base64_embeddings=False) as fake:
        yield fake


def test_an_upstream_that_refuses_base64_is_asked_for_floats_and_the_sdk_gets_base64(
    old_vllm: OpenAIFake, up: Upstreams
) -> None:
    """A server that refuses `encoding_format: base64` (vLLM before 0.5) still serves the
    SDK's default: the first request is asked again for floats, later ones are asked for
    floats at once, and the SDK decodes the base64 the gateway packed. A deployment that
    takes base64 is still asked for it."""
    embedding = {"kind": "embedding", "prices": {"input": 0.02, "output": 0}}
    config = {
        "server": {"shutdown_grace_seconds": 2},
        "store": {"kind": "memory"},
        "providers": {
            "vllm": openai_provider(old_vllm.base_url, breaker=BREAKER_OFF),
            "openai": openai_provider(up.openai.base_url, breaker=BREAKER_OFF),
        },
    }
    policy = {
        "models": {
            "vllm-embed": {
                **embedding,
                "deployments": [{"provider": "vllm", "upstream_model": "bge-m3"}],
            },
            "oa-embed": {
                **embedding,
                "deployments": [{"provider": "openai", "upstream_model": "text-embedding-3-small"}],
            },
        },
        "tenants": {"acme": {"keys": [{"id": "acme-key", "hash": key_hash(ACME_KEY)}]}},
    }
    with GatewayProcess(config, policy) as process:
        for text in ("first", "second"):
            response = client(process).embeddings.create(
                model="vllm-embed", input=text, dimensions=8
            )
            assert response.data[0].embedding == pytest.approx(fake_vector(text, 8), rel=1e-6)
        before = len(up.openai.requests)
        other = client(process).embeddings.create(model="oa-embed", input="third", dimensions=8)
        assert other.data[0].embedding == pytest.approx(fake_vector("third", 8), rel=1e-6)
    asked = [received.body.get("encoding_format") for received in old_vllm.requests]
    assert asked == ["base64", "float", "float"]
    assert [r.body.get("encoding_format") for r in up.openai.requests[before:]] == ["base64"]
