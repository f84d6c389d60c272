"""`POST /v1/embeddings` as an ingress codec: pure functions.

Decode checks the input (a string, strings, token ids, or token-id lists; never empty)
and says where it is wrong. The dispatcher sends the inputs in batches no larger than
the provider takes; `join_batches` puts the vectors back in the client's order, and
`encode_response` writes OpenAI's answer, as float lists or as base64 of little-endian
float32 (what `encoding_format: base64` means at OpenAI, and what the openai SDK asks
for by default).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.errors import InternalError, InvalidRequest
from gateway.ingress.openai_responses import convert, json_object
from gateway.wire.embeddings import EmbeddingInput, EmbeddingsRequest, encode_vector

API = "openai.embeddings"


@dataclass(slots=True)
class EmbeddingsCall:
    request: EmbeddingsRequest
    native: dict[str, Any]
    inputs: list[EmbeddingInput]

    @property
    def has_token_ids(self) -> bool:
        return any(not isinstance(item, str) for item in self.inputs)

    def texts(self) -> list[str]:
        return [item for item in self.inputs if isinstance(item, str)]


def decode(body: bytes) -> EmbeddingsCall:
    native = json_object(body)
    request: EmbeddingsRequest = convert(native, EmbeddingsRequest)
    return EmbeddingsCall(request, native, normalise_inputs(request.input))


def normalise_inputs(value: str | list[Any]) -> list[EmbeddingInput]:
    if isinstance(value, str):
        return [_text(value, "input")]
    if not value:
        raise InvalidRequest("`input` must not be an empty list.", param="input")
    if all(_is_token(v) for v in value):
        return [list(value)]
    inputs: list[EmbeddingInput] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            inputs.append(_text(item, f"input[{i}]"))
        elif isinstance(item, list) and item and all(_is_token(v) for v in item):
            inputs.append(list(item))
        else:
            raise InvalidRequest(
                "Each input must be a non-empty string or a non-empty list of token ids.",
                param=f"input[{i}]",
            )
    return inputs


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text(value: str, param: str) -> str:
    if not value:
        raise InvalidRequest("An input string must not be empty.", param=param)
    return value


def input_tokens(call: EmbeddingsCall, count_text: Callable[[str], int]) -> int:
    """The input's tokens, as limits and prices count them: token ids as sent, text by
    the gateway's tokenizer."""
    return sum(count_text(item) if isinstance(item, str) else len(item) for item in call.inputs)


def batches(inputs: Sequence[EmbeddingInput], size: int) -> list[list[EmbeddingInput]]:
    return [list(inputs[start : start + size]) for start in range(0, len(inputs), size)]


def join_batches(results: Sequence[Sequence[list[float]]], expected: int) -> list[list[float]]:
    vectors = [vector for batch in results for vector in batch]
    if len(vectors) != expected:
        raise InternalError(
            f"the upstream returned {len(vectors)} embeddings for {expected} inputs"
        )
    return vectors


def encode_response(
    vectors: Sequence[list[float]], *, model: str, prompt_tokens: int, encoding_format: str
) -> bytes:
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, encoding_format)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return msgspec.json.encode(body)
