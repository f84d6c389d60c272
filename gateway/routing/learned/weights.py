"""The shipped scorer's weights file: format, loading, and scoring one prompt.

    b"GWROUTER1\n" | header length (uint32, little-endian) | header (JSON, UTF-8)
                   | weights (float32, little-endian, one per feature bucket)

The header names the feature spec the weights were trained with, the bias, and where the
weights came from (data, seed, held-out fold). Loading needs only the standard library:
the serving path has no numpy, torch or scikit-learn in it.
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.routing.learned.text_features import FeatureSpec, featurize

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

    def score(self, text: str) -> float:
        weights = self.weights
        total = self.bias
        for bucket, value in featurize(text, self.spec).items():
            total += weights[bucket] * value
        return _sigmoid(total)

    def score_many(self, texts: list[str]) -> list[float]:
        return [self.score(text) for text in texts]


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def encode(
    name: str, spec: FeatureSpec, bias: float, weights: array[float], extra: dict[str, Any]
) -> bytes:
    if len(weights) != spec.buckets or weights.typecode != "f":
        raise ValueError("weights must be array('f') with one value per bucket")
    header = {"name": name, "format": 1, "spec": spec.as_json(), "bias": bias, **extra}
    head = json.dumps(header, sort_keys=True).encode("utf-8")
    body = array("f", weights)
    if sys.byteorder != "little":
        body.byteswap()
    return MAGIC + len(head).to_bytes(4, "little") + head + body.tobytes()


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
    if len(body) != 4 * spec.buckets:
        raise WeightsError(
            f"{source}: expected {spec.buckets} weights, found {len(body) // 4} (truncated?)"
        )
    weights = array("f")
    weights.frombytes(body)
    if sys.byteorder != "little":
        weights.byteswap()
    return LinearScorer(name=name, spec=spec, bias=bias, weights=weights, header=header)


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
