"""Per-model quality heads: a predicted win-probability for each judged model family,
read off the learned scorer's score the request already has.

    P(model m's answer wins | prompt) = sigmoid(bias_m + slope_m * logit(score))

Two numbers per model: the bias carries the model's base rate (a model that wins more
often overall is predicted better), the slope how much the shipped difficulty score
moves it. Serving adds four sigmoids to the score that was computed anyway, so the
multi-model choice costs no more text features than two-tier routing.

The heads live in a small JSON file beside the scorer's weights (`judged-v1.json`),
written by training/quality_heads.py from data/routing/alpaca_eval.jsonl; loading needs
only the standard library.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.routing.learned.weights import SHIPPED_DIR, WeightsError

FORMAT = "gateway-quality-heads/1"


@dataclass(frozen=True)
class QualityHead:
    bias: float
    slope: float

    def predict(self, score: float) -> float:
        return _sigmoid(self.bias + self.slope * _logit(score))


@dataclass(frozen=True)
class QualityHeads:
    """Judged model name -> its head, and the scorer whose score the heads read."""

    name: str
    scorer: str
    heads: dict[str, QualityHead]
    header: dict[str, Any] = field(default_factory=dict)

    def predict(self, model: str, score: float) -> float | None:
        head = self.heads.get(model)
        return None if head is None else head.predict(score)


# scores this close to 0 or 1 would give an infinite logit
_EDGE = 1e-6


def _logit(p: float) -> float:
    p = min(max(p, _EDGE), 1.0 - _EDGE)
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def encode_heads(heads: QualityHeads) -> str:
    document = {
        **heads.header,
        "format": FORMAT,
        "name": heads.name,
        "scorer": heads.scorer,
        "heads": {m: {"bias": h.bias, "slope": h.slope} for m, h in sorted(heads.heads.items())},
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def decode_heads(text: str, source: str) -> QualityHeads:
    try:
        document = json.loads(text)
        if document.get("format") != FORMAT:
            raise ValueError(f"format is {document.get('format')!r}, expected {FORMAT!r}")
        heads = {
            str(model): QualityHead(float(h["bias"]), float(h["slope"]))
            for model, h in document["heads"].items()
        }
        name, scorer = str(document["name"]), str(document["scorer"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise WeightsError(f"{source}: not a quality-heads file ({exc})") from exc
    header = {k: v for k, v in document.items() if k not in ("heads", "format")}
    return QualityHeads(name=name, scorer=scorer, heads=heads, header=header)


def resolve_heads_path(name: str) -> Path:
    """A shipped heads file by name (`judged-v1`) or a path to one."""
    if "/" in name or name.endswith(".json"):
        return Path(name)
    return SHIPPED_DIR / f"{name}.json"


def load_heads(name: str) -> QualityHeads:
    """Raises WeightsError when the file cannot be read or is not a heads file."""
    path = resolve_heads_path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WeightsError(f"cannot read quality heads {path}: {exc.strerror}") from exc
    return decode_heads(text, str(path))
