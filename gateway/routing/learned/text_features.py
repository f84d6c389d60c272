"""Prompt text -> a sparse, hashed feature vector: what the learned scorer reads.

Pure Python and deterministic across processes and machines (CRC-32, not Python's
salted `hash`), so the training script and the gateway compute the same vector. The cost
is bounded by reading at most `head + tail` characters of the prompt: the start says
what is asked, the end holds the question of a long document.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
# whole words in every script: what a word table (static word vectors) is keyed by
_UNICODE_WORD = re.compile(r"\w+")
_DIGIT = re.compile(r"\d")
# two or more option lines `A. ...`, `B) ...`: a multiple-choice question
_CHOICES = re.compile(r"^\s*[A-D][.)]\s.*\n\s*[A-D][.)]\s", re.MULTILINE)


@dataclass(frozen=True)
class FeatureSpec:
    """How text becomes features; stored in the weights file so a model is always read
    with the features it was trained on."""

    buckets: int = 1 << 18
    head_chars: int = 1536
    tail_chars: int = 512
    word_ngrams: int = 2
    char_ngrams: tuple[int, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "buckets": self.buckets,
            "head_chars": self.head_chars,
            "tail_chars": self.tail_chars,
            "word_ngrams": self.word_ngrams,
            "char_ngrams": list(self.char_ngrams),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> FeatureSpec:
        char = data.get("char_ngrams", [])
        assert isinstance(char, list)
        return cls(
            buckets=_int(data["buckets"]),
            head_chars=_int(data["head_chars"]),
            tail_chars=_int(data["tail_chars"]),
            word_ngrams=_int(data["word_ngrams"]),
            char_ngrams=tuple(_int(n) for n in char),
        )


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def clipped(text: str, spec: FeatureSpec) -> str:
    if len(text) <= spec.head_chars + spec.tail_chars:
        return text
    return text[: spec.head_chars] + " \u2026 " + text[-spec.tail_chars :]


def featurize(text: str, spec: FeatureSpec) -> dict[int, float]:
    """Bucket -> value, L2-normalised (every prompt weighs the same whatever its length)."""
    counts: dict[int, float] = {}
    mask = spec.buckets - 1
    for token in _tokens(text, spec):
        bucket = zlib.crc32(token.encode("utf-8")) & mask
        counts[bucket] = counts.get(bucket, 0.0) + 1.0
    norm = math.sqrt(sum(v * v for v in counts.values())) or 1.0
    features = {bucket: value / norm for bucket, value in counts.items()}
    # shape tokens keep full weight: one of a few hundred n-grams, they would vanish
    for token in _shape(text, spec):
        bucket = zlib.crc32(token.encode("utf-8")) & mask
        features[bucket] = features.get(bucket, 0.0) + 1.0
    return features


def words(text: str, spec: FeatureSpec) -> list[str]:
    """The clipped, lower-cased text's words, in any script (a word table's keys)."""
    return _UNICODE_WORD.findall(clipped(text, spec).lower())


def _tokens(text: str, spec: FeatureSpec) -> Iterable[str]:
    """Word n-grams and optional character n-grams of the clipped, lower-cased text."""
    text = clipped(text, spec).lower()
    words = _WORD.findall(text)
    yield from words
    for n in range(2, spec.word_ngrams + 1):
        for i in range(len(words) - n + 1):
            yield " ".join(words[i : i + n])
    for n in spec.char_ngrams:
        squeezed = " ".join(text.split())
        for i in range(len(squeezed) - n + 1):
            yield "\x01" + squeezed[i : i + n]


def _shape(text: str, spec: FeatureSpec) -> Iterable[str]:
    """A few shape tokens (length, digits, lines, code fences), so the model can learn
    that long or numeric prompts differ; each also crossed with whether the prompt is a
    multiple-choice question, where length means something else (a reading passage)."""
    choice = "mc" if _CHOICES.search(clipped(text, spec)) else "open"
    length = _log_bucket(len(text))
    digits = _log_bucket(len(_DIGIT.findall(text)))
    yield f"\x02len:{length}"
    yield f"\x02digits:{digits}"
    yield f"\x02lines:{_log_bucket(text.count(chr(10)))}"
    yield f"\x02len:{length}:{choice}"
    yield f"\x02digits:{digits}:{choice}"
    if "```" in text:
        yield "\x02code-fence"


def _log_bucket(n: int) -> int:
    """Half-octave buckets: 0, 1, 2, 3, 4-5, 6-7, 8-11, ..."""
    return 0 if n <= 0 else int(2 * math.log2(n)) + 1
