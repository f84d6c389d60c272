"""The shipped scorer's weights file: format, loading, and scoring one prompt.

    b"GWROUTER1\n" | header length (uint32, little-endian) | header (JSON, UTF-8)
                   | weights (float32, little-endian, one per feature bucket)
                   [ | word values (float32, one per word) | the words (UTF-8, "\n"-joined) ]

The header names the feature spec the weights were trained with, the bias, and where the
weights came from (data, seed, held-out fold). A scorer may carry a word table instead of
(`spec.buckets` 0) or beside the n-gram weights: one number a word, the mean over the
prompt's known words added to the logit. It is how a linear head on the mean of static
word vectors is served: the head's dot product with each word's vector, folded in when
the file is written, so no vector and no encoder is needed here. Loading needs only the
standard library: the serving path has no numpy, torch or scikit-learn in it.
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.routing.learned.text_features import FeatureSpec, featurize, words

MAGIC = b"GWROUTER1\n"
SHIPPED_DIR = Path(__file__).resolve().parent / "weights"


class WeightsError(Exception):
    """The weights file is missing, truncated, or not a router weights file."""


@dataclass(frozen=True)
class LinearScorer:
    """P(strong tier needed | prompt) = sigmoid(bias + w . features(prompt))."""

    name: str
    spec: FeatureSpec
    bias: float
    weights: array[float]  # array('f'), `spec.buckets` long
    header: dict[str, Any] = field(default_factory=dict)
    # word -> its share of the logit, averaged over the prompt's words found here
    word_values: dict[str, float] | None = None

    def score(self, text: str) -> float:
        total = self.bias
        if self.spec.buckets:
            weights = self.weights
            for bucket, value in featurize(text, self.spec).items():
                total += weights[bucket] * value
        if self.word_values is not None:
            table = self.word_values
            found = [table[w] for w in words(text, self.spec) if w in table]
            if found:
                total += sum(found) / len(found)
        return _sigmoid(total)

    def score_many(self, texts: list[str]) -> list[float]:
        return [self.score(text) for text in texts]


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def encode(
    name: str,
    spec: FeatureSpec,
    bias: float,
    weights: array[float],
    extra: dict[str, Any],
    word_values: dict[str, float] | None = None,
) -> bytes:
    if len(weights) != spec.buckets or weights.typecode != "f":
        raise ValueError("weights must be array('f') with one value per bucket")
    header = {"name": name, "format": 1, "spec": spec.as_json(), "bias": bias, **extra}
    table = sorted(word_values.items()) if word_values is not None else []
    listed = "\n".join(w for w, _ in table).encode("utf-8")
    if word_values is not None:
        if any(not w or "\n" in w for w, _ in table):
            raise ValueError("a word table's words must be non-empty and one line each")
        # the exact sizes: a file cut short anywhere is refused, never read as other words
        header["words"] = len(table)
        header["word_bytes"] = len(listed)
    head = json.dumps(header, sort_keys=True).encode("utf-8")
    body = array("f", weights)
    values = array("f", [v for _, v in table])
    if sys.byteorder != "little":
        body.byteswap()
        values.byteswap()
    out = MAGIC + len(head).to_bytes(4, "little") + head + body.tobytes()
    if word_values is not None:
        out += values.tobytes() + listed
    return out


def decode(data: bytes, source: str) -> LinearScorer:
    if not data.startswith(MAGIC):
        raise WeightsError(f"{source}: not a router weights file (bad magic)")
    start = len(MAGIC) + 4
    if len(data) < start:
        raise WeightsError(f"{source}: truncated header")
    length = int.from_bytes(data[len(MAGIC) : start], "little")
    try:
        header = json.loads(data[start : start + length].decode("utf-8"))
        spec = FeatureSpec.from_json(header["spec"])
        bias = float(header["bias"])
        name = str(header["name"])
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise WeightsError(f"{source}: unreadable header ({exc})") from exc
    body = data[start + length :]
    count = header.get("words")
    if count is None:
        table_bytes = b""
        if len(body) != 4 * spec.buckets:
            raise WeightsError(
                f"{source}: expected {spec.buckets} weights, found {len(body) // 4} (truncated?)"
            )
    elif (
        not isinstance(count, int)
        or count < 1
        or len(body) != 4 * (spec.buckets + count) + int(header.get("word_bytes", -1))
    ):
        raise WeightsError(
            f"{source}: expected a word table of {count!r} words, found {len(body)} bytes"
            " after the header (truncated?)"
        )
    else:
        body, table_bytes = body[: 4 * spec.buckets], body[4 * spec.buckets :]
    weights = array("f")
    weights.frombytes(body)
    if sys.byteorder != "little":
        weights.byteswap()
    word_values = _word_table(table_bytes, count, source) if count is not None else None
    return LinearScorer(
        name=name, spec=spec, bias=bias, weights=weights, header=header, word_values=word_values
    )


def _word_table(data: bytes, count: int, source: str) -> dict[str, float]:
    values = array("f")
    values.frombytes(data[: 4 * count])
    if sys.byteorder != "little":
        values.byteswap()
    try:
        table = data[4 * count :].decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise WeightsError(f"{source}: its word table is not UTF-8 (damaged?)") from None
    if len(table) != count:
        raise WeightsError(f"{source}: {len(table)} words for {count} values (truncated?)")
    return dict(zip(table, values, strict=True))


def resolve_path(scorer: str) -> Path:
    """A shipped scorer by name (`ngram-v1`) or a path to a weights file."""
    if "/" in scorer or scorer.endswith(".bin"):
        return Path(scorer)
    return SHIPPED_DIR / f"{scorer}.bin"


def load_scorer(scorer: str) -> LinearScorer:
    """Raises WeightsError when the file cannot be read or is not a weights file."""
    path = resolve_path(scorer)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WeightsError(f"cannot read router weights {path}: {exc.strerror}") from exc
    return decode(data, str(path))
