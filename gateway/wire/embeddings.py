"""OpenAI embeddings wire types (`POST /v1/embeddings`), and Gemini's
`embedContent` / `batchEmbedContents` answers."""

from __future__ import annotations

import base64
import struct
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

PositiveInt = Annotated[int, Meta(ge=1)]
# one input to embed: a string, or token ids
EmbeddingInput = str | list[int]


class EmbeddingsRequest(Struct, omit_defaults=True):
    model: str
    # a string, a list of strings, a list of token ids, or a list of token-id lists:
    # checked item by item by the codec (msgspec unions allow one list type)
    input: str | list[Any]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: PositiveInt | None = None
    user: str | None = None


class EmbeddingsBody(dict[str, Any]):
    """The client's embeddings request as its JSON object (the native body), carrying
    the typed request and the inputs the codec checked it as: a translation reads them
    here instead of converting the object again at each of its steps."""

    __slots__ = ("inputs", "request")

    def __init__(
        self, value: dict[str, Any], request: EmbeddingsRequest, inputs: list[EmbeddingInput]
    ) -> None:
        super().__init__(value)
        self.request = request
        self.inputs = inputs


class OpenAIEmbedding(Struct):
    index: int
    embedding: list[float] | str


class OpenAIEmbeddingsResponse(Struct):
    data: list[OpenAIEmbedding]
    usage: dict[str, Any] | None = None
    model: str | None = None


class GeminiValues(Struct):
    values: list[float]


class GeminiEmbedResponse(Struct):
    embedding: GeminiValues


class GeminiBatchEmbedResponse(Struct):
    embeddings: list[GeminiValues]


class OpenAIRawEmbedding(Struct):
    index: int
    # the vector as the upstream wrote it (checked by `number_list_text` before it is
    # passed on, decoded where it is not a flat list of numbers)
    embedding: msgspec.Raw


class OpenAIRawEmbeddingsResponse(Struct):
    data: list[OpenAIRawEmbedding]
    usage: dict[str, Any] | None = None
    model: str | None = None


openai_response_decoder = msgspec.json.Decoder(OpenAIEmbeddingsResponse)
openai_raw_response_decoder = msgspec.json.Decoder(OpenAIRawEmbeddingsResponse)
vector_decoder = msgspec.json.Decoder(list[float] | str)
gemini_single_decoder = msgspec.json.Decoder(GeminiEmbedResponse)
gemini_batch_decoder = msgspec.json.Decoder(GeminiBatchEmbedResponse)


def encode_vector(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


def number_list_text(raw: bytes) -> bytes | None:
    """`raw` (syntactically valid JSON, as msgspec found it) as it is, if it is a flat
    list of numbers: the vector as the upstream wrote it, whitespace and digits'
    spelling included (`0.10` stays `0.10`, `0` stays `0`: the same JSON numbers). None
    for anything else (base64, nesting, strings): those are decoded.

    Valid JSON holding no quote, brace, second bracket or the letters of true, false
    and null is a flat list of numbers; each test is a memchr. Nothing here walks the
    bytes in Python or counts them: a 1,536-float vector is ~16 KB, and the earlier
    check (every number with a point) and compaction were three passes of ~15 us each,
    more than the rest of an embeddings request's own work."""
    # `find`, not `in`: on Python 3.11 `needle in data` first tries the needle as an
    # integer and makes and drops a TypeError (~250 ns here) before it searches
    find = raw.find
    if (
        raw[:1] != b"["
        or find(b"[", 1) != -1
        or find(b'"') != -1
        or find(b"{") != -1
        or find(b"t") != -1
        or find(b"f") != -1
        or find(b"n") != -1
    ):
        return None
    return raw


def decode_base64_vector(data: str) -> list[float]:
    raw = base64.b64decode(data)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _is_base64_of_float32s(text: bytes) -> bool:
    """Whole 4-character groups of the alphabet, at most two `=` at the end, and a decoded
    length of whole float32s: checked by its shape, not decoded. (Decoding a
    1,536-float vector's 8 KB to check it took ~60 us here; `translate` deletes the
    alphabet in ~8.)"""
    body = text.rstrip(b"=")
    padding = len(text) - len(body)
    return not (
        len(text) % 4
        or padding > 2
        or body.translate(None, _BASE64_ALPHABET)
        or (len(text) // 4 * 3 - padding) % 4
    )


def checked_base64_vector(data: str) -> str:
    """`data` as it is, if it is base64 of whole float32s (what OpenAI-compatible
    upstreams answer for `encoding_format: base64`); else ValueError."""
    if not _is_base64_of_float32s(data.encode("ascii")):  # (UnicodeEncodeError too)
        raise ValueError("an embedding that is neither numbers nor whole float32s in base64")
    return data


def base64_vector_text(raw: bytes) -> bytes | None:
    """`raw` (syntactically valid JSON, as msgspec found it) as it is, if it is a string
    of base64 of whole float32s written without escapes: passed on as its text, it is
    neither decoded from JSON nor encoded again (~50k instructions of an 8 KB vector's
    request). None for anything else, which is decoded: a number list, or a string an
    encoder wrote with escapes (`\\/` for `/` is valid JSON)."""
    if raw[:1] != b'"' or not _is_base64_of_float32s(raw[1:-1]):
        return None
    return raw


class InvalidInput(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def normalise_inputs(value: str | list[Any]) -> list[EmbeddingInput]:
    if isinstance(value, str):
        return [_text(value, "input")]
    if not value:
        raise InvalidInput("`input` must not be an empty list.", "input")
    if all(_is_token(v) for v in value):
        return [list(value)]
    inputs: list[EmbeddingInput] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            inputs.append(_text(item, f"input[{i}]"))
        elif isinstance(item, list) and item and all(_is_token(v) for v in item):
            inputs.append(list(item))
        else:
            raise InvalidInput(
                "Each input must be a non-empty string or a non-empty list of token ids.",
                f"input[{i}]",
            )
    return inputs


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text(value: str, param: str) -> str:
    if not value:
        raise InvalidInput("An input string must not be empty.", param)
    return value
