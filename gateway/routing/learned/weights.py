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

A scorer may also be a gated composite of weights files (gated.py): JSON, `<name>.json`.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import weakref
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.routing.learned.gated import GatedFormatError, GatedScorer, decode_gated, sigmoid
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
    word_values: WordTable | None = None

    def score(self, text: str) -> float:
        ngrams, by_word = self.needs()
        features = featurize(text, self.spec) if ngrams else {}
        return sigmoid(self.logit_of(features, words(text, self.spec) if by_word else []))

    def needs(self) -> tuple[bool, bool]:
        """Whether it reads the prompt's n-gram features, and its words."""
        return bool(self.spec.buckets), self.word_values is not None

    def logit_of(self, features: dict[int, float], prompt_words: list[str]) -> float:
        total = self.bias
        if self.spec.buckets:
            weights = self.weights
            for bucket, value in features.items():
                total += weights[bucket] * value
        if self.word_values is not None:
            index, values = self.word_values.vocabulary.index, self.word_values.column
            found = [values[i] for i in map(index.get, prompt_words) if i is not None]
            if found:
                total += sum(found) / len(found)
        return total

    def score_many(self, texts: list[str]) -> list[float]:
        return [self.score(text) for text in texts]


class _Vocabulary:
    """A word table's words -> their row, shared by every table over the same words."""

    __slots__ = ("__weakref__", "index")

    def __init__(self, index: dict[str, int]) -> None:
        self.index = index


# by a digest of the words: the chat table and the exam-question gate hold the same
# 150,000 words, and their dictionary is most of a table's ~26 MB in memory
_vocabularies: weakref.WeakValueDictionary[bytes, _Vocabulary] = weakref.WeakValueDictionary()


class WordTable(Mapping[str, float]):
    """Word -> its share of the logit: the values in an array, the words in a dictionary
    that tables over the same words share."""

    __slots__ = ("column", "vocabulary")

    def __init__(self, vocabulary: _Vocabulary, column: array[float]) -> None:
        self.vocabulary = vocabulary
        self.column = column  # array('f'): the value of the word at each row

    def __getitem__(self, word: str) -> float:
        return self.column[self.vocabulary.index[word]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.vocabulary.index)

    def __len__(self) -> int:
        return len(self.vocabulary.index)


# what a learned route's `scorer` names: one weights file, or a gated composite of them
Scorer = LinearScorer | GatedScorer


# header keys this module writes itself: an `extra` may not set them
_RESERVED = ("name", "format", "spec", "bias", "words", "word_bytes")


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
    if any(key in extra for key in _RESERVED):
        raise ValueError(f"extra header keys may not include {', '.join(_RESERVED)}")
    header = {"name": name, "format": 1, "spec": spec.as_json(), "bias": bias, **extra}
    table = sorted(word_values.items()) if word_values is not None else []
    listed = "\n".join(w for w, _ in table).encode("utf-8")
    if word_values is not None:
        if not table:
            raise ValueError("a word table needs at least one word")
        if any(not w or "\n" in w for w, _ in table):
            raise ValueError("a word table's words must be non-empty and one line each")
        if not all(math.isfinite(v) for _, v in table):
            raise ValueError("a word table's values must be finite")
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
        if not isinstance(header, dict) or not isinstance(header["spec"], dict):
            raise TypeError("not a JSON object with a spec object")
        spec = FeatureSpec.from_json(header["spec"])
        bias = float(header["bias"])
        name = str(header["name"])
        count = _count(header, "words", minimum=1)
        word_bytes = _count(header, "word_bytes", minimum=0)
    except (ValueError, KeyError, TypeError, AssertionError, OverflowError) as exc:
        raise WeightsError(f"{source}: unreadable header ({exc})") from exc
    if spec.buckets < 0 or not math.isfinite(bias) or (count is None) != (word_bytes is None):
        raise WeightsError(f"{source}: unreadable header (sizes or bias out of range)")
    body = data[start + length :]
    expected = 4 * spec.buckets + (
        4 * count + word_bytes if count and word_bytes is not None else 0
    )
    if len(body) != expected:
        what = f"{spec.buckets} weights" + (f" and a word table of {count} words" if count else "")
        raise WeightsError(
            f"{source}: expected {what}, found {len(body)} bytes after the header (truncated?)"
        )
    weights = array("f")
    weights.frombytes(body[: 4 * spec.buckets])
    if sys.byteorder != "little":
        weights.byteswap()
    word_values = None
    if count is not None:
        word_values = _word_table(body[4 * spec.buckets :], count, source)
    return LinearScorer(
        name=name, spec=spec, bias=bias, weights=weights, header=header, word_values=word_values
    )


def _count(header: dict[str, Any], key: str, minimum: int) -> int | None:
    value = header.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{key} must be an integer of at least {minimum}, got {value!r}")
    return value


def _word_table(data: bytes, count: int, source: str) -> WordTable:
    values = array("f")
    values.frombytes(data[: 4 * count])
    if sys.byteorder != "little":
        values.byteswap()
    if not all(math.isfinite(v) for v in values):
        raise WeightsError(f"{source}: its word table has a value not finite")
    listed = data[4 * count :]
    key = hashlib.blake2b(listed, digest_size=16).digest()
    vocabulary = _vocabularies.get(key)
    if vocabulary is None:
        try:
            words = listed.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            raise WeightsError(f"{source}: its word table is not UTF-8 (damaged?)") from None
        if len(words) != count:
            raise WeightsError(f"{source}: {len(words)} words for {count} values (truncated?)")
        index = {w: i for i, w in enumerate(words)}
        if not all(words) or len(index) != count:
            raise WeightsError(f"{source}: its word table has an empty or a repeated word")
        vocabulary = _vocabularies[key] = _Vocabulary(index)
    elif len(vocabulary.index) != count:  # the same words under another count
        raise WeightsError(f"{source}: {len(vocabulary.index)} words for {count} values")
    return WordTable(vocabulary, values)


# `learned.scorer: redis:ROUTE`: the version of ROUTE's weights promoted in Redis
# (gateway/state/scorer_versions.py), adopted by every replica as it is promoted
VERSIONED_PREFIX = "redis:"


def versioned_route(scorer: str) -> str | None:
    """The route whose promoted Redis versions a scorer name stands for, or None."""
    return scorer.removeprefix(VERSIONED_PREFIX) if scorer.startswith(VERSIONED_PREFIX) else None


def calibrated_threshold(scorer: Scorer) -> float | None:
    """The out-of-fold threshold `route train --from-labels` wrote into the header."""
    calibration = scorer.header.get("calibration") if isinstance(scorer.header, dict) else None
    if isinstance(calibration, dict) and isinstance(calibration.get("threshold"), int | float):
        return float(calibration["threshold"])
    return None


def resolve_path(scorer: str, directory: Path = SHIPPED_DIR) -> Path:
    """A scorer by name (`ngram-v1`: `<name>.bin`, or `<name>.json` for a gated one, in
    `directory`) or a path to a weights file."""
    if "/" in scorer or scorer.endswith((".bin", ".json")):
        return Path(scorer)
    binary = directory / f"{scorer}.bin"
    gated = directory / f"{scorer}.json"
    return gated if gated.exists() and not binary.exists() else binary


# decoded files by path and content: a policy reload re-reads every scorer it names, and
# building a word table's dictionary (150,000 words: ~0.1 s) would stall the event loop
# each time for a file that did not change. A gated scorer is not kept: it is rebuilt
# on each load from its (kept) parts, so a retrained part is never served stale.
_loaded: dict[tuple[str, bytes], LinearScorer] = {}


def load_scorer(scorer: str) -> Scorer:
    """Raises WeightsError when the file cannot be read or is not a weights file."""
    path = resolve_path(scorer)
    data = _read(path)
    if data.startswith(MAGIC):
        return _linear(path, data)
    if not data.lstrip().startswith(b"{"):
        raise WeightsError(f"{path}: not a router weights file (bad magic)")

    def part(name: str) -> LinearScorer:
        # a bare name or a relative path is beside the composite
        found = path.parent / resolve_path(name, path.parent)
        content = _read(found)
        if not content.startswith(MAGIC):
            raise WeightsError(f"{path}: its part {found} is not a router weights file")
        return _linear(found, content)

    try:
        return decode_gated(data, part)
    except GatedFormatError as exc:
        raise WeightsError(f"{path}: {exc}") from None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise WeightsError(f"cannot read router weights {path}: {exc.strerror}") from exc


def _linear(path: Path, data: bytes) -> LinearScorer:
    key = (str(path), hashlib.blake2b(data, digest_size=16).digest())
    cached = _loaded.get(key)
    if cached is None:
        cached = decode(data, str(path))
        for old in [k for k in _loaded if k[0] == key[0]]:
            del _loaded[old]  # one version a path: a retrained file replaces the last
        _loaded[key] = cached
    return cached
