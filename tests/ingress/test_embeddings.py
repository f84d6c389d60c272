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
from gateway.ingress.embeddings import EmbeddingsCodec, decode, input_tokens
from gateway.providers.base import Call, Target
from gateway.providers.embeddings import (
    GeminiEmbeddings,
    OpenAIEmbeddings,
    batches,
    embeddings_body,
    join_batches,
)
from gateway.settings.server import ProviderSettings
from gateway.tokens import count_text
from gateway.wire.apis import OPENAI_EMBEDDINGS
from tests.fakes.openai_server import VLLM_NO_BASE64

OPENAI_PARAMS = TypeAdapter(EmbeddingCreateParams)


def decoded(**fields: Any) -> Any:
    return decode(json.dumps({"model": "embed", **fields}).encode())


def call_of(**fields: Any) -> Call:
    decoded = EmbeddingsCodec().decode(json.dumps({"model": "embed", **fields}).encode(), {})
    return Call(
        decoded.request,
        decoded.chat_body,
        "embed",
        "req-1",
        1,
        api=OPENAI_EMBEDDINGS,
        native=decoded.native_body,
        untranslatable=decoded.untranslatable,
    )


def openai_target(batch: int | None = None) -> Target:
    settings = ProviderSettings(
        kind="openai",
        api_key=SecretStr("sk-test"),
        base_url="http://o/v1",
        embedding_batch_size=batch,
    )
    return Target("openai", settings, "text-embedding-3-small", "http://o/v1")


def gemini_target(batch: int | None = None) -> Target:
    settings = ProviderSettings(
        kind="gemini", api_key=SecretStr("AIza-test"), embedding_batch_size=batch
    )
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
        embeddings_body(vectors, model="embed", prompt_tokens=3, encoding_format="float")
    )
    assert [d.embedding for d in floats.data] == vectors
    assert floats.usage.prompt_tokens == 3
    b64 = json.loads(
        embeddings_body(vectors, model="embed", prompt_tokens=3, encoding_format="base64")
    )
    raw = base64.b64decode(b64["data"][1]["embedding"])
    assert list(struct.unpack("<2f", raw)) == [1.0, 0.0]


def test_openai_upstream_requests_ask_the_clients_format_in_batches_of_the_cap() -> None:
    call = call_of(input=["a", "b", "c"], dimensions=64, encoding_format="base64")
    upstreams = OpenAIEmbeddings().build_requests(call, openai_target(batch=2))
    assert [u.url for u in upstreams] == ["http://o/v1/embeddings"] * 2
    bodies = [json.loads(u.body) for u in upstreams]
    for body in bodies:
        OPENAI_PARAMS.validate_python(body)
    assert bodies[0] == {
        "model": "text-embedding-3-small",
        "input": ["a", "b"],
        "encoding_format": "base64",
        "dimensions": 64,
    }
    assert bodies[1]["input"] == ["c"]
    assert upstreams[0].headers["authorization"] == "Bearer sk-test"


def openai_answer(vectors: list[Any], tokens: int | None) -> bytes:
    body: dict[str, Any] = {
        "object": "list",
        "model": "m",
        "data": [
            {"object": "embedding", "index": i, "embedding": v}
            for i, v in reversed(list(enumerate(vectors)))
        ],
    }
    if tokens is not None:
        body["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return json.dumps(body).encode()


def test_batched_answers_rejoin_in_order_in_the_clients_encoding_with_summed_usage() -> None:
    call = call_of(input=["a", "b", "c"], encoding_format="base64")
    packed = base64.b64encode(struct.pack("<2f", 0.5, 0.25)).decode()
    bodies = [openai_answer([[1.0, 2.0], packed], 4), openai_answer([[3.0, 4.0]], 2)]
    translated = OpenAIEmbeddings().parse_responses(bodies, call, openai_target(batch=2))
    assert translated.api == OPENAI_EMBEDDINGS
    assert translated.usage.input_tokens == 6 and not translated.usage.estimated
    parsed = json.loads(translated.body)
    assert parsed["object"] == "list"
    vectors = [list(struct.unpack("<2f", base64.b64decode(d["embedding"]))) for d in parsed["data"]]
    assert vectors == [[1.0, 2.0], [0.5, 0.25], [3.0, 4.0]]
    assert parsed["model"] == "m"  # the served model, as the upstream named it
    with pytest.raises(UpstreamUnavailable):
        OpenAIEmbeddings().parse_responses(
            [openai_answer([[1.0]], 1)] * 2, call, openai_target(batch=2)
        )


def test_gemini_uses_embed_content_for_one_and_batch_for_many() -> None:
    translation = GeminiEmbeddings()
    (single,) = translation.build_requests(call_of(input="hi", dimensions=8), gemini_target())
    assert single.url == "https://g.test/v1beta/models/gemini-embedding-001:embedContent"
    assert single.headers["x-goog-api-key"] == "AIza-test"
    body = json.loads(single.body)
    gtypes.EmbedContentConfig(output_dimensionality=body["outputDimensionality"])
    gtypes.Content.model_validate(body["content"])
    assert body["content"] == {"parts": [{"text": "hi"}]}
    first, second = translation.build_requests(
        call_of(input=["a", "b", "c"]), gemini_target(batch=2)
    )
    assert first.url.endswith(":batchEmbedContents") and second.url.endswith(":embedContent")
    requests = json.loads(first.body)["requests"]
    assert [r["content"]["parts"][0]["text"] for r in requests] == ["a", "b"]
    assert all(r["model"] == "models/gemini-embedding-001" for r in requests)


def test_gemini_usage_is_the_gateways_count_and_token_ids_are_refused() -> None:
    translation = GeminiEmbeddings()
    call = call_of(input=["hello world", "b"])
    translated = translation.parse_responses(
        [b'{"embeddings": [{"values": [1]}, {"values": [2]}]}'], call, gemini_target()
    )
    assert json.loads(translated.body)["data"][1]["embedding"] == [2.0]
    assert translated.usage.estimated
    assert translated.usage.input_tokens == count_text("hello world") + count_text("b")
    with pytest.raises(InvalidRequest) as raised:
        translation.build_requests(call_of(input=[1, 2]), gemini_target())
    assert raised.value.param == "input"


def test_the_codec_marks_input_untranslatable_and_routes_on_the_text() -> None:
    decoded = EmbeddingsCodec().decode(b'{"model": "embed", "input": ["one", "two"]}', {})
    assert decoded.untranslatable == "input"
    assert decoded.request.messages[0].text() == "one\ntwo"
    assert decoded.request.output_limit == 1


def test_float_vectors_pass_on_as_the_upstream_wrote_them_and_anything_else_is_decoded() -> None:
    """A flat list of numbers goes out as the upstream wrote it (its whitespace and its
    digits' spelling), not re-encoded; base64 is decoded, and a vector that is not
    numbers is the upstream's fault."""
    pretty = (
        b'{"object": "list", "model": "m", "data": [\n'
        b'  {"object": "embedding", "index": 1, "embedding": [\n    0.10,\n    -2.5e-05\n  ]},\n'
        b'  {"object": "embedding", "index": 0, "embedding": [0, 1e-05]}\n'
        b'], "usage": {"prompt_tokens": 2, "total_tokens": 2}}'
    )
    floats = OpenAIEmbeddings().parse_responses(
        [pretty], call_of(input=["a", "b"]), openai_target()
    )
    assert b'"embedding":[\n    0.10,\n    -2.5e-05\n  ]' in floats.body
    assert b'"embedding":[0, 1e-05]' in floats.body
    assert json.loads(floats.body)["data"] == [
        {"object": "embedding", "index": 0, "embedding": [0.0, 1e-05]},
        {"object": "embedding", "index": 1, "embedding": [0.1, -2.5e-05]},
    ]
    b64 = OpenAIEmbeddings().parse_responses(
        [pretty], call_of(input=["a", "b"], encoding_format="base64"), openai_target()
    )
    vectors = [
        list(struct.unpack("<2f", base64.b64decode(d["embedding"])))
        for d in json.loads(b64.body)["data"]
    ]
    assert vectors == [
        list(struct.unpack("<2f", struct.pack("<2f", *v))) for v in ([0.0, 1e-05], [0.1, -2.5e-05])
    ]
    not_numbers = (b'["0.5"]', b"[[0.5]]", b'{"a": 0.5}', b"[true]", b"[null]", b"[0.5, false]")
    malformed = (b"[0.5, {}]", b"[1..2]", b"[0.5,]", b"[01]", b"[-]", b"[1e]", b"[0.5 0.5]")
    for bad in not_numbers + malformed:
        body = b'{"data": [{"index": 0, "embedding": ' + bad + b"}]}"
        with pytest.raises(UpstreamUnavailable):
            OpenAIEmbeddings().parse_responses([body], call_of(input="a"), openai_target())


def test_the_upstream_is_asked_for_the_clients_format_and_its_base64_passes_on_as_it_came() -> None:
    """The official SDK asks for base64 by default: the upstream is asked for base64 too,
    and its text goes out as it came (not decoded to floats and packed again); asked for
    floats, the same answer is decoded; base64 that is not whole float32s is the
    upstream's fault."""
    for wanted in ("base64", "float"):
        (upstream,) = OpenAIEmbeddings().build_requests(
            call_of(input="a", encoding_format=wanted), openai_target()
        )
        assert json.loads(upstream.body)["encoding_format"] == wanted
    text = base64.b64encode(struct.pack("<3f", 0.5, -1.25, 3.0)).decode()
    body = json.dumps(
        {"object": "list", "model": "m", "data": [{"index": 0, "embedding": text}]}
    ).encode()
    as_base64 = OpenAIEmbeddings().parse_responses(
        [body], call_of(input="a", encoding_format="base64"), openai_target()
    )
    assert b'"embedding":"' + text.encode() + b'"' in as_base64.body
    as_floats = OpenAIEmbeddings().parse_responses(
        [body], call_of(input="a", encoding_format="float"), openai_target()
    )
    assert json.loads(as_floats.body)["data"][0]["embedding"] == [0.5, -1.25, 3.0]
    # JSON lets an encoder escape `/` (and any letter): the same base64, decoded first
    slashed = base64.b64encode(struct.pack("<2f", 1.9999999, 0.5)).decode()
    assert "/" in slashed
    escaped = (
        b'{"data": [{"index": 0, "embedding": "'
        + slashed.replace("/", "\\/").replace("A", "\\u0041").encode()
        + b'"}]}'
    )
    as_escaped = OpenAIEmbeddings().parse_responses(
        [escaped], call_of(input="a", encoding_format="base64"), openai_target()
    )
    assert json.loads(as_escaped.body)["data"][0]["embedding"] == slashed
    bad_texts = ("not base64!", base64.b64encode(b"\x00" * 6).decode(), "AAA", "A===", "AA=A", "é")
    for bad in (*bad_texts, "AA\nA", "AAA\\"):
        bad_body = json.dumps({"data": [{"index": 0, "embedding": bad}]}).encode()
        with pytest.raises(UpstreamUnavailable):
            OpenAIEmbeddings().parse_responses(
                [bad_body], call_of(input="a", encoding_format="base64"), openai_target()
            )


def test_base64_has_a_common_form_and_only_a_refusal_naming_it_asks_for_it() -> None:
    """vLLM before 0.5 refused base64 (400, naming it), a strict validator answers 422
    naming `encoding_format`: those refusals say the form was refused, and the batch's
    common form asks for floats, the rest of it unchanged (the client still gets base64,
    packed from the floats). Any other refusal stands; a request for floats has no
    other form."""
    translation = OpenAIEmbeddings()
    call = call_of(input="a", encoding_format="base64")
    (refused,) = translation.build_requests(call, openai_target())
    vllm = json.dumps(VLLM_NO_BASE64).encode()
    detail = b'{"detail": [{"loc": ["body", "encoding_format"], "msg": "permitted: \'float\'"}]}'
    too_long = b'{"error": {"message": "maximum context length is 8192 tokens"}}'
    assert translation.refuses_form(400, vllm)
    assert translation.refuses_form(422, detail)
    assert not translation.refuses_form(400, too_long)
    assert not translation.refuses_form(500, vllm)
    common = translation.in_common_form(refused)
    assert common is not None
    assert json.loads(common.body) == {**json.loads(refused.body), "encoding_format": "float"}
    assert (common.url, common.headers) == (refused.url, refused.headers)
    (floats,) = translation.build_requests(call_of(input="a"), openai_target())
    assert translation.in_common_form(floats) is None
    answer = json.dumps({"data": [{"index": 0, "embedding": [0.5, -1.25]}]}).encode()
    parsed = json.loads(translation.parse_responses([answer], call, openai_target()).body)
    assert struct.unpack("<2f", base64.b64decode(parsed["data"][0]["embedding"])) == (0.5, -1.25)
    assert GeminiEmbeddings().in_common_form(refused) is None
    assert not GeminiEmbeddings().refuses_form(400, vllm)
