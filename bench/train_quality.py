"""Fit the per-model quality heads (gateway/routing/learned/quality.py) from the chat data.

    .venv/bin/python bench/train_quality.py            # writes weights/judged-v1.json, -v2.json
    .venv/bin/python bench/train_quality.py --check    # refits, compares with the shipped files

Two files, one per multi-model chat set (data/routing/README.md):

- judged-v1 from alpaca_eval.jsonl: for 805 chat prompts, a GPT-4-Turbo judge's verdict
  on eleven models' answers against GPT-4 Turbo's own (1 = the model's answer won, 0.5 a
  tie): the quality a head predicts is a win-probability against GPT-4 Turbo;
- judged-v2 from hellobench.jsonl: for 647 long-generation prompts, a GPT-4o judge's
  checklist score (0-1) of 23 models' answers, among them the nearest stand-ins yet for
  the catalog's families (GPT-4o, Claude 3.5 Sonnet, Gemini 1.5 Pro, DeepSeek-Chat,
  Llama-3.1-8B): the quality a head predicts is that score.

For each judged model, a two-parameter logistic regression maps the shipped scorer's
logit (ngram-v1, trained on MMLU, GSM8K and MT-Bench only, so these prompts were never
its training data) to that model's quality. The fit is Newton's method on the mean
log-loss with a small ridge on the slope: deterministic, no seed.

Needs numpy (a dev dependency); the gateway reads the JSON without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.routing.learned.quality import (
    QualityHead,
    QualityHeads,
    decode_heads,
    encode_heads,
)
from gateway.routing.learned.weights import SHIPPED_DIR, load_scorer
from gateway.training.fitting import SLOPE_L2, fit_head, score_logits

ROOT = Path(__file__).resolve().parent.parent
CHAT_FILE = ROOT / "data" / "routing" / "alpaca_eval.jsonl"
SHIPPED_NAME = "judged-v1"
SCORER = "ngram-v1"


@dataclass(frozen=True)
class HeadsSource:
    name: str
    path: Path
    trained_on: str
    label: str


SOURCES = (
    HeadsSource(
        SHIPPED_NAME,
        CHAT_FILE,
        "data/routing/alpaca_eval.jsonl (805 prompts, all five sources)",
        "the GPT-4-Turbo judge preferred the model's answer to GPT-4 Turbo's (tie 0.5)",
    ),
    HeadsSource(
        "judged-v2",
        ROOT / "data" / "routing" / "hellobench.jsonl",
        "data/routing/hellobench.jsonl (647 prompts, all five tasks)",
        "the GPT-4o judge's weighted checklist score of the model's answer (0-1)",
    ),
)


def load_chat(path: Path = CHAT_FILE) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def judged_models(items: Sequence[dict[str, object]]) -> list[str]:
    first = items[0]["judged"]
    assert isinstance(first, dict)
    return sorted(first)


def fit_heads(
    scores: npt.NDArray[np.float64],
    items: Sequence[dict[str, object]],
    rows: npt.NDArray[np.int64],
    models: Sequence[str],
) -> dict[str, QualityHead]:
    """One head per model, fitted on `rows` (a model's unjudged prompts are skipped)."""
    x = score_logits(scores)
    heads: dict[str, QualityHead] = {}
    for model in models:
        keep, labels = [], []
        for row in rows:
            judged = items[row]["judged"]
            assert isinstance(judged, dict)
            value = judged.get(model)
            if value is not None:
                keep.append(row)
                labels.append(float(value))
        heads[model] = fit_head(x[np.asarray(keep)], np.asarray(labels))
    return heads


def shipped_scores(items: Sequence[dict[str, object]]) -> npt.NDArray[np.float64]:
    scorer = load_scorer(SCORER)
    return np.asarray([scorer.score(str(item["prompt"])) for item in items])


def shipped_heads(name: str = SHIPPED_NAME) -> QualityHeads:
    source = next(s for s in SOURCES if s.name == name)
    items = load_chat(source.path)
    scores = shipped_scores(items)
    models = judged_models(items)
    heads = fit_heads(scores, items, np.arange(len(items)), models)
    header = {
        "trained_on": source.trained_on,
        "label": source.label,
        "reads": "sigmoid(bias + slope * logit(score of the scorer named here))",
        "slope_l2": SLOPE_L2,
    }
    return QualityHeads(name=source.name, scorer=SCORER, heads=heads, header=header)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped files")
    args = parser.parse_args(argv)
    worst = 0.0
    for source in SOURCES:
        heads = shipped_heads(source.name)
        path = SHIPPED_DIR / f"{source.name}.json"
        print(f"\n{source.name}: {source.trained_on}")
        print(f"{'judged model':28} {'bias':>8} {'slope':>8} {'at base':>8}")
        for model, head in sorted(heads.heads.items()):
            at_base = 1 / (1 + np.exp(-head.bias))
            print(f"{model:28} {head.bias:8.3f} {head.slope:8.3f} {at_base:8.3f}")
        if args.check:
            shipped = decode_heads(path.read_text(encoding="utf-8"), str(path))
            worst = max(
                worst,
                *(
                    abs(a - b)
                    for m, h in heads.heads.items()
                    for a, b in ((h.bias, shipped.heads[m].bias), (h.slope, shipped.heads[m].slope))
                ),
            )
            print(f"largest difference so far: {worst:.2e}")
            continue
        path.write_text(encode_heads(heads), encoding="utf-8")
        print(f"wrote {path}")
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
