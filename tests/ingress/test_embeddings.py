"""The embeddings codec and the embeddings translations (OpenAI-compatible, Gemini):
input shapes, batching in order, base64, dimensions; bodies checked against the
official SDKs' types."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest
from google.genai import types as gtypes
from openai.types import CreateEmbeddingResponse
from openai.types.embedding_create_params import EmbeddingCreateParams
from pydantic import SecretStr, TypeAdapter

from gateway.errors import InternalError, InvalidRequest, UpstreamUnavailable
from gateway.ingress.embeddings import (
    batches,
    decode,
    encode_response,
    input_tokens,
    join_batches,
)
from gateway.providers.base import Target
from gateway.providers.embeddings import GeminiEmbeddings, OpenAIEmbeddings
from gateway.settings.server import ProviderSettings
from gateway.tokens import count_text

OPENAI_PARAMS = TypeAdapter(EmbeddingCreateParams)


def decoded(**fields: Any) -> Any:
    return decode(json.dumps({"model": "embed", **fields}).encode())


def openai_target() -> Target:
    settings = ProviderSettings(kind="openai", api_key=SecretStr("sk-test"), base_url="http://o/v1")
    return Target("openai", settings, "text-embedding-3-small", "http://o/v1")


def gemini_target() -> Target:
    settings = ProviderSettings(kind="gemini", api_key=SecretStr("AIza-test"))
    return Target("gemini", settings, "gemini-embedding-001", "https://g.test")


@pytest.mark.parametrize(
    ("value", "inputs"),
    [
        ("one", ["one"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
    ],
)
def test_every_input_shape_becomes_a_list_of_inputs(value: Any, inputs: list[Any]) -> None:
    assert decoded(input=value).inputs == inputs


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ([], "input"),
        ("", "input"),
        (["a", ""], "input[1]"),
        (["a", 3], "input[1]"),
        ([[1], []], "input[1]"),
        (None, "input"),
    ],
)
def test_bad_inputs_name_where(value: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decoded(input=value)
    assert raised.value.param == param


def test_bad_encoding_format_and_dimensions_are_400s() -> None:
    for fields, param in (
        ({"encoding_format": "hex"}, "encoding_format"),
        ({"dimensions": 0}, "dimensions"),
    ):
        with pytest.raises(InvalidRequest) as raised:
            decoded(input="x", **fields)
        assert raised.value.param == param


def test_input_tokens_count_text_and_token_ids() -> None:
    assert input_tokens(decoded(input=[[1, 2, 3], [4]]), count_text) == 4
    assert input_tokens(decoded(input="hello world"), count_text) == count_text("hello world")


def test_batches_split_at_the_cap_and_join_back_in_order() -> None:
    inputs: list[Any] = [str(i) for i in range(7)]
    split = batches(inputs, 3)
    assert split == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    vectors = [[[float(x)] for x in batch] for batch in split]
    assert join_batches(vectors, 7) == [[float(i)] for i in range(7)]
    with pytest.raises(InternalError, match="6 embeddings for 7"):
        join_batches([*vectors[:-1], []], 7)


def test_the_response_parses_as_the_sdk_type_in_both_encodings() -> None:
    vectors = [[0.5, -0.25], [1.0, 0.0]]
    floats = CreateEmbeddingResponse.model_validate_json(
        encode_response(vectors, model="embed", prompt_tokens=3, encoding_format="float")
    )
    assert [d.embedding for d in floats.data] == vectors
    assert floats.usage.prompt_tokens == 3
    b64 = json.loads(
        encode_response(vectors, model="embed", prompt_tokens=3, encoding_format="base64")
    )
    raw = base64.b64decode(b64["data"][1]["embedding"])
    assert list(struct.unpack("<2f", raw)) == [1.0, 0.0]


def test_openai_upstream_request_asks_floats_with_dimensions() -> None:
    call = decoded(input=["a", "b"], dimensions=64, encoding_format="base64")
    upstream = OpenAIEmbeddings().build_request(call.inputs, call.request, openai_target())
    assert upstream.url == "http://o/v1/embeddings"
    body = json.loads(upstream.body)
    OPENAI_PARAMS.validate_python(body)
    assert body == {
        "model": "text-embedding-3-small",
        "input": ["a", "b"],
        "encoding_format": "float",
        "dimensions": 64,
    }
    assert upstream.headers["authorization"] == "Bearer sk-test"


def test_openai_upstream_answers_are_read_in_index_order_floats_or_base64() -> None:
    packed = base64.b64encode(struct.pack("<2f", 0.5, 0.25)).decode()
    body = json.dumps(
        {
            "object": "list",
            "model": "m",
            "data": [
                {"object": "embedding", "index": 1, "embedding": packed},
                {"object": "embedding", "index": 0, "embedding": [1.0, 2.0]},
            ],
            "usage": {"prompt_tokens": 4, "total_tokens": 4},
        }
    ).encode()
    batch = OpenAIEmbeddings().parse_response(body, 2, openai_target())
    assert batch.vectors == [[1.0, 2.0], [0.5, 0.25]]
    assert batch.prompt_tokens == 4
    with pytest.raises(UpstreamUnavailable):
        OpenAIEmbeddings().parse_response(body, 3, openai_target())


def test_gemini_uses_embed_content_for_one_and_batch_for_many() -> None:
    translation = GeminiEmbeddings()
    one = decoded(input="hi", dimensions=8)
    single = translation.build_request(one.inputs, one.request, gemini_target())
    assert single.url == "https://g.test/v1beta/models/gemini-embedding-001:embedContent"
    assert single.headers["x-goog-api-key"] == "AIza-test"
    body = json.loads(single.body)
    gtypes.EmbedContentConfig(output_dimensionality=body["outputDimensionality"])
    gtypes.Content.model_validate(body["content"])
    assert body["content"] == {"parts": [{"text": "hi"}]}
    many = decoded(input=["a", "b"])
    batch = translation.build_request(many.inputs, many.request, gemini_target())
    assert batch.url.endswith(":batchEmbedContents")
    requests = json.loads(batch.body)["requests"]
    assert [r["content"]["parts"][0]["text"] for r in requests] == ["a", "b"]
    assert all(r["model"] == "models/gemini-embedding-001" for r in requests)


def test_gemini_answers_are_vectors_without_usage_and_token_ids_are_refused() -> None:
    translation = GeminiEmbeddings()
    single = translation.parse_response(
        b'{"embedding": {"values": [0.1, 0.2]}}', 1, gemini_target()
    )
    assert single.vectors == [[0.1, 0.2]] and single.prompt_tokens is None
    many = translation.parse_response(
        b'{"embeddings": [{"values": [1]}, {"values": [2]}]}', 2, gemini_target()
    )
    assert many.vectors == [[1.0], [2.0]]
    tokens = decoded(input=[1, 2])
    with pytest.raises(InvalidRequest) as raised:
        translation.build_request(tokens.inputs, tokens.request, gemini_target())
    assert raised.value.param == "input"
