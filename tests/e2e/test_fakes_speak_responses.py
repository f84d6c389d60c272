"""The fakes the Responses and embeddings tests stand on, read by the official SDKs
directly: if they drift from the real wire formats, these fail first."""

from __future__ import annotations

import struct

import openai
import pytest
from google import genai
from google.genai import types as gt

from tests.fakes.gemini_server import DEFAULT_KEY, GeminiFake
from tests.fakes.openai_server import OpenAIFake, Reply, fake_vector


def test_the_openai_fake_answers_responses_streamed_and_not() -> None:
    with OpenAIFake() as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x")
        whole = client.responses.create(model="gpt-4.1", input="hello there")
        assert whole.output_text == "echo: hello there"
        with client.responses.stream(model="gpt-4.1", input="hello there") as stream:
            final = stream.get_final_response()
        assert final.output_text == whole.output_text
        fake.enqueue(Reply(tool_call={"name": "lookup", "arguments": '{"q": 1}'}))
        called = client.responses.create(
            model="gpt-4.1",
            input="find",
            tools=[
                {
                    "type": "function",
                    "name": "lookup",
                    "parameters": {"type": "object"},
                    "strict": False,
                }
            ],
        )
        assert called.output[0].type == "function_call"
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="gpt-4.1", input=5)  # type: ignore[arg-type]


def test_the_openai_fake_embeds_and_refuses_batches_over_its_cap() -> None:
    with OpenAIFake() as fake:
        fake.embedding_batch_cap = 3
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x")
        # the SDK asks for base64 unless told otherwise, and the fake answers it as OpenAI
        # does: float32s, so the vectors come back at float32's precision
        result = client.embeddings.create(model="e", input=["a", "b"])
        for item, text in zip(result.data, ("a", "b"), strict=True):
            assert item.embedding == pytest.approx(fake_vector(text), rel=1e-6)
            # float32s: the fake answered base64
            assert all(v == struct.unpack("<f", struct.pack("<f", v))[0] for v in item.embedding)
        floats = client.embeddings.create(model="e", input="a", encoding_format="float")
        assert floats.data[0].embedding == fake_vector("a")
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model="e", input=["a"] * 4)
    # vLLM before 0.5: base64 (the SDK's default) refused, floats served
    with OpenAIFake(dialect="compatible", base64_embeddings=False) as old_vllm:
        client = openai.OpenAI(base_url=old_vllm.base_url, api_key="sk-x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="base64 encoding is not currently"):
            client.embeddings.create(model="e", input="a")
        served = client.embeddings.create(model="e", input="a", encoding_format="float")
        assert served.data[0].embedding == fake_vector("a")


def test_the_gemini_fake_embeds_one_or_a_batch_for_google_genai() -> None:
    with GeminiFake() as fake:
        client = genai.Client(
            api_key=DEFAULT_KEY, http_options=gt.HttpOptions(base_url=fake.base_url)
        )
        result = client.models.embed_content(
            model="gemini-embedding-001",
            contents=["one", "two"],
            config=gt.EmbedContentConfig(output_dimensionality=4),
        )
        assert result.embeddings is not None
        assert [e.values for e in result.embeddings] == [
            fake_vector("one", 4),
            fake_vector("two", 4),
        ]
