"""The emulator's `POST /v1/embeddings`, as SGLang and vLLM serve it: deterministic
unit vectors of the requested size, the same input always giving the same vector (and
different inputs different ones), so tests can check order and batching end to end.

The vector comes from SHA-256 in counter mode over (seed, input): no model, no data.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

import msgspec

DEFAULT_DIMENSIONS = 256
MAX_DIMENSIONS = 8192


class EmbeddingsRejected(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def embed(value: str | list[int], dimensions: int, seed: int = 0) -> list[float]:
    key = msgspec.json.encode([seed, value])
    raw = b""
    counter = 0
    while len(raw) < dimensions * 4:
        raw += hashlib.sha256(key + counter.to_bytes(4, "little")).digest()
        counter += 1
    # uniform in [-1, 1), then scaled to unit length, as embedding models normalise
    numbers = [(n / 2**31) - 1.0 for n in struct.unpack(f"<{dimensions}I", raw[: dimensions * 4])]
    norm = math.sqrt(sum(x * x for x in numbers)) or 1.0
    return [x / norm for x in numbers]


def _inputs(value: Any) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str | list) for v in value):
        return list(value)
    raise EmbeddingsRejected("input must be a string, strings, or token ids", "input")


def _tokens(value: str | list[int]) -> int:
    return len(value) if isinstance(value, list) else max(1, len(value.split()))


def embeddings_body(body: bytes, model: str, seed: int) -> bytes:
    """The answer to one embeddings request body (raises EmbeddingsRejected for a 400)."""
    try:
        request = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise EmbeddingsRejected("the body is not JSON") from None
    if not isinstance(request, dict):
        raise EmbeddingsRejected("the body must be a JSON object")
    inputs = _inputs(request.get("input"))
    dimensions = request.get("dimensions") or DEFAULT_DIMENSIONS
    if not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise EmbeddingsRejected(f"dimensions must be 1..{MAX_DIMENSIONS}", "dimensions")
    tokens = sum(_tokens(item) for item in inputs)
    return msgspec.json.encode(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": embed(item, dimensions, seed)}
                for i, item in enumerate(inputs)
            ],
            "model": request.get("model") or model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
