"""Embeddings upstreams: OpenAI-compatible `/embeddings` (OpenAI, SGLang, vLLM) and
Gemini's `embedContent` / `batchEmbedContents`. Pure: one batch of inputs in, the
upstream HTTP request out; the upstream's body in, the batch's vectors (in input order)
and the usage it reports out.

Choices that are not one-to-one: upstreams are always asked for floats (the gateway
encodes base64 itself, so every provider answers both formats); Gemini takes text only
(token-id input is a 400 naming `input`) and reports no token counts, so its usage is
the gateway's own count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from gateway.errors import InvalidRequest, UpstreamError
from gateway.providers.base import Target, UpstreamRequest
from gateway.providers.gemini import GeminiTranslation, request_headers
from gateway.providers.openai_compatible import openai_style_error
from gateway.providers.openai_out import unreadable
from gateway.wire import embeddings as wire
from gateway.wire.embeddings import EmbeddingInput, EmbeddingsRequest, decode_base64_vector


class EmbeddingsTranslation(Protocol):
    def build_request(
        self, inputs: list[EmbeddingInput], request: EmbeddingsRequest, target: Target
    ) -> UpstreamRequest: ...

    def parse_response(self, body: bytes, expected: int, target: Target) -> EmbeddedBatch: ...

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError: ...


class EmbeddedBatch(msgspec.Struct):
    vectors: list[list[float]]
    # None: the upstream reported no token count
    prompt_tokens: int | None


class OpenAIEmbeddings:
    def build_request(
        self, inputs: list[EmbeddingInput], request: EmbeddingsRequest, target: Target
    ) -> UpstreamRequest:
        body: dict[str, Any] = {
            "model": target.upstream_model,
            "input": inputs,
            "encoding_format": "float",
        }
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        if request.user is not None:
            body["user"] = request.user
        headers = {"content-type": "application/json"}
        headers.update(target.settings.headers)
        if target.settings.api_key is not None:
            headers["authorization"] = "Bearer " + target.settings.api_key.get_secret_value()
        return UpstreamRequest(
            url=target.base_url.rstrip("/") + "/embeddings",
            body=msgspec.json.encode(body),
            headers=headers,
        )

    def parse_response(self, body: bytes, expected: int, target: Target) -> EmbeddedBatch:
        try:
            parsed = wire.openai_response_decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise unreadable(target, "a body that is not an embeddings response") from None
        ordered = sorted(parsed.data, key=lambda item: item.index)
        vectors = [
            decode_base64_vector(item.embedding)
            if isinstance(item.embedding, str)
            else item.embedding
            for item in ordered
        ]
        if len(vectors) != expected:
            raise unreadable(target, f"{len(vectors)} embeddings for {expected} inputs")
        usage = parsed.usage or {}
        tokens = usage.get("prompt_tokens")
        return EmbeddedBatch(vectors, int(tokens) if isinstance(tokens, int) else None)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        return openai_style_error(status, body, headers, target.provider)


def gemini_models_base(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/v1beta") else base + "/v1beta"


class GeminiEmbeddings:
    def build_request(
        self, inputs: list[EmbeddingInput], request: EmbeddingsRequest, target: Target
    ) -> UpstreamRequest:
        model = target.upstream_model
        entries = [self._entry(item, i, request, model) for i, item in enumerate(inputs)]
        base = f"{gemini_models_base(target.base_url)}/models/{model}"
        if len(entries) == 1:
            url, body = f"{base}:embedContent", entries[0]
        else:
            url, body = f"{base}:batchEmbedContents", {"requests": entries}
        return UpstreamRequest(
            url=url, body=msgspec.json.encode(body), headers=request_headers(target)
        )

    @staticmethod
    def _entry(
        item: EmbeddingInput, index: int, request: EmbeddingsRequest, model: str
    ) -> dict[str, Any]:
        if not isinstance(item, str):
            raise InvalidRequest(
                "Gemini embeds text only; send strings rather than token ids for this model.",
                param="input",
            )
        entry: dict[str, Any] = {"model": f"models/{model}", "content": {"parts": [{"text": item}]}}
        if request.dimensions is not None:
            entry["outputDimensionality"] = request.dimensions
        return entry

    def parse_response(self, body: bytes, expected: int, target: Target) -> EmbeddedBatch:
        try:
            if expected == 1:
                vectors = [wire.gemini_single_decoder.decode(body).embedding.values]
            else:
                vectors = [e.values for e in wire.gemini_batch_decoder.decode(body).embeddings]
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise unreadable(target, "a body that is not a Gemini embeddings response") from None
        if len(vectors) != expected:
            raise unreadable(target, f"{len(vectors)} embeddings for {expected} inputs")
        return EmbeddedBatch(vectors, None)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        return GeminiTranslation().map_error(status, body, headers, target)


def embeddings_translator_for(kind: str) -> EmbeddingsTranslation | None:
    """None: that provider kind serves no embeddings (Anthropic has no embeddings API)."""
    if kind == "openai":
        return OpenAIEmbeddings()
    if kind == "gemini":
        return GeminiEmbeddings()
    return None
