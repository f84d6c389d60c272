"""A scorer made of scorers: a base score, and an addition that counts only where gates
say the prompt is not the kind of text the base was trained on.

    logit = base + weight * (1 - max(gate probabilities)) ** power * addition

It is how `auto-learned` reads both exam questions and chat: the hashed n-grams
(`ngram-v1`, trained on MMLU, GSM8K and MT-Bench) rank questions within a benchmark, the
chat word table (`chat-words-v1`) ranks open-ended requests and ranks exam questions
backwards, and two "is this an exam question" classifiers (`exam-ngrams-v1`,
`exam-words-v1`) keep the word table off the questions (docs/learned-routing.md).

The file is JSON naming its parts, each an ordinary weights file (weights.py) found
beside it (a bare name) or at a path; a part may not itself be a composite:

    {"format": "gateway-gated-scorer", "version": 1, "name": "ngram-chat-v1",
     "base": "ngram-v1", "addition": "chat-words-v1",
     "gates": ["exam-ngrams-v1", "exam-words-v1"], "weight": 5.0, "power": 4, ...}

Each part's text features are computed once a prompt however many parts read them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.routing.learned.text_features import FeatureSpec, featurize, words

FORMAT = "gateway-gated-scorer"
# keys the file must have (beside provenance, which is kept as the header)
_PARTS = ("base", "addition", "gates", "weight", "power")


class GatedFormatError(ValueError):
    """The JSON is not a gated scorer (weights.py turns it into a WeightsError)."""


class Part(Protocol):
    """What a gated scorer needs of a weights file: its logit from features read once."""

    @property
    def spec(self) -> FeatureSpec: ...

    def needs(self) -> tuple[bool, bool]: ...

    def logit_of(self, features: dict[int, float], prompt_words: list[str]) -> float: ...


@dataclass(frozen=True)
class GatedScorer:
    name: str
    base: Part
    addition: Part
    gates: tuple[Part, ...]
    weight: float
    power: float
    header: dict[str, Any] = field(default_factory=dict)

    def score(self, text: str) -> float:
        # one reading per feature spec: the base and the n-gram gate share theirs
        readings: dict[FeatureSpec, tuple[dict[int, float], list[str]]] = {}

        def logit(part: Part) -> float:
            reading = readings.get(part.spec)
            if reading is None:
                ngrams, by_word = part.needs()
                reading = readings[part.spec] = (
                    featurize(text, part.spec) if ngrams else {},
                    words(text, part.spec) if by_word else [],
                )
            return part.logit_of(*reading)

        openness = 1.0 - max(sigmoid(logit(gate)) for gate in self.gates)
        total = logit(self.base)
        if openness > 0.0:
            total += self.weight * openness**self.power * logit(self.addition)
        return sigmoid(total)

    def score_many(self, texts: list[str]) -> list[float]:
        return [self.score(text) for text in texts]


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def decode_gated(data: bytes, load_part: Callable[[str], Part]) -> GatedScorer:
    """Raises GatedFormatError for a malformed file; `load_part` raises its own error for
    a part that cannot be read."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise GatedFormatError(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != 1:
        raise GatedFormatError(f'not a gated scorer (expected "format": "{FORMAT}", version 1)')
    missing = [key for key in _PARTS if key not in doc]
    if missing:
        raise GatedFormatError(f"missing {', '.join(missing)}")
    gates, weight, power = doc["gates"], doc["weight"], doc["power"]
    names = [doc["base"], doc["addition"], *(gates if isinstance(gates, list) else [None])]
    if not isinstance(gates, list) or not gates or not all(isinstance(n, str) for n in names):
        raise GatedFormatError("base and addition must be scorer names, gates a non-empty list")
    numbers = (weight, power)
    if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        raise GatedFormatError("weight and power must be numbers")
    if not (math.isfinite(weight) and math.isfinite(power) and power >= 0):
        raise GatedFormatError("weight must be finite and power a finite number >= 0")
    header = {k: v for k, v in doc.items() if k not in _PARTS}
    return GatedScorer(
        name=str(doc.get("name", "gated")),
        base=load_part(doc["base"]),
        addition=load_part(doc["addition"]),
        gates=tuple(load_part(name) for name in gates),
        weight=float(weight),
        power=float(power),
        header=header,
    )
