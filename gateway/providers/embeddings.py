"""Embeddings upstreams: OpenAI-compatible `/embeddings` (OpenAI, SGLang, vLLM) and
Gemini's `embedContent` / `batchEmbedContents`, as translations of the embeddings API
(they answer in OpenAI's embeddings shape, so the codec passes the body on).

A request's inputs go out in batches no larger than the provider takes
(`embedding_batch_size`), all to the same deployment, and the vectors come back joined
in the client's order. Choices that are not one-to-one: an OpenAI-compatible upstream is
asked for the format the client asked for, and a base64 answer passes on as it came (the
official SDK asks for base64 by default: decoding 1,536 floats and packing them again cost
more than the rest of a request); an upstream that answers floats anyway, and Gemini
(floats only), are encoded by the gateway, so every provider answers both formats;
Gemini takes text only (token ids are a 400 naming `input`) and reports no token
counts, so its usage is the gateway's own count, marked estimated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gateway.errors import InternalError, InvalidRequest, UpstreamError
from gateway.providers.base import Call, StreamTranslation, Target, Translated, UpstreamRequest
from gateway.providers.gemini import GeminiTranslation, request_headers
from gateway.providers.openai_compatible import openai_style_error
from gateway.providers.openai_out import unreadable
from gateway.tokens import count_text
from gateway.usage import Usage
from gateway.wire import embeddings as wire
from gateway.wire.apis import OPENAI_EMBEDDINGS
from gateway.wire.embeddings import (
    EmbeddingInput,
    EmbeddingsBody,
    EmbeddingsRequest,
    decode_base64_vector,
    encode_vector,
    normalise_inputs,
)
from gateway.wire.served_model import served_model


def batches(inputs: Sequence[EmbeddingInput], size: int) -> list[list[EmbeddingInput]]:
    if len(inputs) <= size:  # the common case: one batch, without the slicing
        return [list(inputs)]
    return [list(inputs[start : start + size]) for start in range(0, len(inputs), size)]


# a vector decoded, or as the upstream wrote it, passed on as it came: its list of numbers
# (wire.number_list_text) or its base64 string (wire.base64_vector_text), as JSON text
# (Raw); base64 an upstream wrote with escapes is decoded and checked (a str,
# wire.checked_base64_vector). Re-encoding 1,536 floats cost more than the rest of a
# request
Vector = list[float] | msgspec.Raw | str


def join_batches(results: Sequence[Sequence[Vector]], expected: int) -> list[Vector]:
    vectors = [vector for batch in results for vector in batch]
    if len(vectors) != expected:
        raise InternalError(
            f"the upstream returned {len(vectors)} embeddings for {expected} inputs"
        )
    return vectors


def embeddings_body(
    vectors: Sequence[Vector], *, model: str, prompt_tokens: int, encoding_format: str
) -> bytes:
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encoded(v, encoding_format)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return msgspec.json.encode(body)


def _encoded(vector: Vector, encoding_format: str) -> list[float] | str | msgspec.Raw:
    if isinstance(vector, msgspec.Raw):
        written = "base64" if memoryview(vector)[0] == ord('"') else "float"
        if encoding_format == written:
            return vector
        decoded = wire.vector_decoder.decode(vector)
        vector = decoded if isinstance(decoded, list) else decode_base64_vector(decoded)
    elif isinstance(vector, str):
        if encoding_format == "base64":
            return vector
        vector = decode_base64_vector(vector)
    return encode_vector(vector, encoding_format)


class EmbeddedBatch(msgspec.Struct):
    vectors: list[Vector]
    # None: the upstream reported no token count
    prompt_tokens: int | None
    # the model the upstream named in its answer, if it named one
    model: str | None = None


def _request_of(call: Call) -> tuple[EmbeddingsRequest, list[EmbeddingInput]]:
    """The client's embeddings request (validated by the codec already): as the codec
    typed it, or converted again from a body a stage rebuilt as a plain object (a
    clamped output cap does)."""
    native = call.native
    if isinstance(native, EmbeddingsBody):
        return native.request, native.inputs
    request = msgspec.convert(dict(native or {}), EmbeddingsRequest)
    return request, normalise_inputs(request.input)


class _EmbeddingsTranslation:
    """What both embeddings translations share: batching, joining, usage, the body."""

    api = OPENAI_EMBEDDINGS

    def batch_request(
        self, inputs: list[EmbeddingInput], request: EmbeddingsRequest, target: Target
    ) -> UpstreamRequest:
        raise NotImplementedError

    def parse_batch(self, body: bytes, expected: int, target: Target) -> EmbeddedBatch:
        raise NotImplementedError

    def build_requests(self, call: Call, target: Target) -> list[UpstreamRequest]:
        request, inputs = _request_of(call)
        size = target.settings.max_embedding_batch
        return [self.batch_request(batch, request, target) for batch in batches(inputs, size)]

    def parse_responses(self, bodies: list[bytes], call: Call, target: Target) -> Translated:
        request, inputs = _request_of(call)
        size = target.settings.max_embedding_batch
        parsed = [
            self.parse_batch(body, len(batch), target)
            for body, batch in zip(bodies, batches(inputs, size), strict=True)
        ]
        vectors = join_batches([p.vectors for p in parsed], len(inputs))
        if all(p.prompt_tokens is not None for p in parsed):
            usage = Usage(input_tokens=sum(p.prompt_tokens or 0 for p in parsed))
        else:
            counted = sum(count_text(i) if isinstance(i, str) else len(i) for i in inputs)
            usage = Usage(input_tokens=counted, estimated=True)
        body = embeddings_body(
            vectors,
            model=served_model(parsed[0].model if parsed else None, target.upstream_model),
            prompt_tokens=usage.input_tokens,
            encoding_format=request.encoding_format,
        )
        return Translated(body, usage, api=OPENAI_EMBEDDINGS)

    # the single-request Translation protocol: one batch
    def build_request(self, call: Call, target: Target) -> UpstreamRequest:
        requests = self.build_requests(call, target)
        if len(requests) != 1:
            raise InternalError("a batched embeddings request must be sent batch by batch")
        return requests[0]

    def parse_response(self, body: bytes, call: Call, target: Target) -> Translated:
        return self.parse_responses([body], call, target)

    def in_common_form(self, upstream: UpstreamRequest) -> UpstreamRequest | None:
        return None

    def refuses_form(self, status: int, body: bytes) -> bool:
        return False

    def stream(self, call: Call, target: Target) -> StreamTranslation:
        raise InvalidRequest("Embeddings do not stream.", param="stream")


_ASKS_BASE64 = b'"encoding_format":"base64"'
_ASKS_FLOAT = b'"encoding_format":"float"'


class OpenAIEmbeddings(_EmbeddingsTranslation):
    """OpenAI's embeddings API, and the servers that speak it (vLLM, SGLang, llama.cpp,
    TEI, ...). Not all of them take `encoding_format: base64`: vLLM before 0.5 answers
    400 "base64 encoding is not currently supported", a strict validator 422 naming the
    field; the dispatcher asks such a deployment for floats (`in_common_form`), which
    every one of them takes, and the gateway packs the base64 itself."""

    def batch_request(
        self, inputs: list[EmbeddingInput], request: EmbeddingsRequest, target: Target
    ) -> UpstreamRequest:
        body: dict[str, Any] = {
            "model": target.upstream_model,
            "input": inputs,
            "encoding_format": request.encoding_format,
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

    def in_common_form(self, upstream: UpstreamRequest) -> UpstreamRequest | None:
        """A request for base64 asked for floats instead (the body is compact JSON, as
        `batch_request` encodes it: an input's own quotes are escaped, so the field is
        the one unescaped match)."""
        if upstream.body.find(_ASKS_BASE64) < 0:
            return None
        body = upstream.body.replace(_ASKS_BASE64, _ASKS_FLOAT, 1)
        return UpstreamRequest(url=upstream.url, body=body, headers=upstream.headers)

    def refuses_form(self, status: int, body: bytes) -> bool:
        """A bad request whose error names base64 or `encoding_format`; any other
        refusal stands (a too-long input is not asked twice)."""
        if status not in (400, 422):
            return False
        error = body.lower()
        return error.find(b"base64") >= 0 or error.find(b"encoding_format") >= 0

    def parse_batch(self, body: bytes, expected: int, target: Target) -> EmbeddedBatch:
        try:
            parsed = wire.openai_raw_response_decoder.decode(body)
            ordered = sorted(parsed.data, key=lambda item: item.index)
            vectors = [_vector(bytes(item.embedding)) for item in ordered]
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            # (ValueError: base64 that is not, or not whole float32s)
            raise unreadable(target, "a body that is not an embeddings response") from None
        if len(vectors) != expected:
            raise unreadable(target, f"{len(vectors)} embeddings for {expected} inputs")
        usage = parsed.usage or {}
        tokens = usage.get("prompt_tokens")
        prompt_tokens = int(tokens) if isinstance(tokens, int) else None
        return EmbeddedBatch(vectors, prompt_tokens, parsed.model)

    def map_error(
        self, status: int, body: bytes, headers: Mapping[str, str], target: Target
    ) -> UpstreamError:
        return openai_style_error(status, body, headers, target.provider)


def _vector(raw: bytes) -> Vector:
    """One answered vector: a flat list of numbers passes on as its text, base64 as its
    text once checked; anything else is decoded."""
    text = wire.number_list_text(raw)
    if text is None:
        text = wire.base64_vector_text(raw)
    if text is not None:
        return msgspec.Raw(text)
    decoded = wire.vector_decoder.decode(raw)
    return wire.checked_base64_vector(decoded) if isinstance(decoded, str) else decoded


def gemini_models_base(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/v1beta") else base + "/v1beta"


class GeminiEmbeddings(_EmbeddingsTranslation):
    def batch_request(
        self, inputs: list[EmbeddingInput], request: EmbeddingsRequest, target: Target
    ) -> UpstreamRequest:
        model = target.upstream_model
        entries = [self._entry(item, request, model) for item in inputs]
        base = f"{gemini_models_base(target.base_url)}/models/{model}"
        if len(entries) == 1:
            url, body = f"{base}:embedContent", entries[0]
        else:
            url, body = f"{base}:batchEmbedContents", {"requests": entries}
        return UpstreamRequest(
            url=url, body=msgspec.json.encode(body), headers=request_headers(target)
        )

    @staticmethod
    def _entry(item: EmbeddingInput, request: EmbeddingsRequest, model: str) -> dict[str, Any]:
        if not isinstance(item, str):
            raise InvalidRequest(
                "Gemini embeds text only; send strings rather than token ids for this model.",
                param="input",
            )
        entry: dict[str, Any] = {"model": f"models/{model}", "content": {"parts": [{"text": item}]}}
        if request.dimensions is not None:
            entry["outputDimensionality"] = request.dimensions
        return entry

    def parse_batch(self, body: bytes, expected: int, target: Target) -> EmbeddedBatch:
        vectors: list[Vector]
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
