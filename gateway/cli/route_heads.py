"""`gateway route heads`: fit the multi-model quality heads on your own judged prompts.

A `choice: cheapest_above` route predicts each model's quality from the scorer's score
through one small head per judged model (gateway/routing/learned/quality.py). The
shipped heads read public judgments of stand-in models; this command fits them on yours:
JSON lines `{"prompt": "...", "judged": {"model-a": 0.9, "model-b": null, ...}}`, a
quality in [0, 1] per model that answered (a judge's grade / 10, a win 1 / tie 0.5 /
loss 0, a test pass rate), the format data/routing/hellobench.jsonl uses.

It prints, per model, out-of-fold evidence: the mean log-loss of its head on the prompts
of each fold, fitted on the others, beside a head that knows only the model's base rate.
A head no better than its base rate means the score does not tell that model's good
answers from its bad ones on your traffic: the route will then follow base rates.

Needs numpy (`pip install 'gateway[train]'`); serving never does.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gateway.cli.fitting_input import InputError, numbered_lines, numpy_missing
from gateway.routing.learned.quality import QualityHead, QualityHeads, encode_heads
from gateway.routing.learned.weights import Scorer, WeightsError, load_scorer
from gateway.training.labelled import FOLDS, LabelledPrompt, fold_of

MIN_PROMPTS = 50
# a model judged on fewer prompts gets no head (the route then orders it by cost)
MIN_JUDGED = 20


def register(actions: Any) -> None:
    heads = actions.add_parser(
        "heads",
        help="fit the multi-model quality heads on your own judged prompts (needs numpy)",
        description=__doc__.split("\n\n")[0],
    )
    heads.add_argument(
        "--data",
        type=Path,
        action="append",
        required=True,
        metavar="FILE.jsonl",
        help='judged prompts {"prompt", "judged": {model: quality 0-1 or null}} (repeatable)',
    )
    heads.add_argument("--out", type=Path, required=True, metavar="FILE.json")
    heads.add_argument(
        "--scorer",
        default="ngram-v1",
        help="the scorer whose score the heads read: the route's `learned.scorer` "
        "(default ngram-v1)",
    )
    heads.set_defaults(func=run_heads)


@dataclass(frozen=True)
class Judged:
    prompt: str
    qualities: dict[str, float]


@dataclass(frozen=True)
class ModelEvidence:
    model: str
    prompts: int
    mean_quality: float
    head: QualityHead
    loss: float
    base_rate_loss: float


def run_heads(args: argparse.Namespace) -> int:
    if numpy_missing("gateway route heads"):
        return 1
    out: Path = args.out
    try:
        if out.suffix != ".json":
            # a route's `quality:` reads a name without "/" or ".json" as a shipped file
            raise InputError(f"--out {out}: the heads file's name must end in .json")
        items = _read(args.data)
        if len(items) < MIN_PROMPTS:
            raise InputError(f"{len(items)} judged prompts; fitting needs at least {MIN_PROMPTS}")
        scorer = load_scorer(args.scorer)
        evidence = _fit(items, scorer)
        if not evidence:
            raise InputError(f"no model is judged on at least {MIN_JUDGED} prompts")
        heads = QualityHeads(
            name=out.stem,
            scorer=scorer.name,
            heads={e.model: e.head for e in evidence},
            header={
                "trained_on": [str(p) for p in args.data],
                "label": "your judged quality of each model's answer (0-1)",
                "reads": "sigmoid(bias + slope * logit(score of the scorer named here))",
                "scorer_path": args.scorer,
            },
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(encode_heads(heads), encoding="utf-8")
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    except (WeightsError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _print(sys.stdout, evidence, out, len(items))
    return 0


def _read(files: list[Path]) -> list[Judged]:
    return [_parse(line, where) for where, line in numbered_lines(files)]


def _parse(line: str, where: str) -> Judged:
    try:
        item = json.loads(line)
        prompt, judged = item["prompt"], item["judged"]
        if not isinstance(prompt, str) or not isinstance(judged, dict):
            raise TypeError("prompt must be a string and judged an object")
        qualities = {}
        for model, value in judged.items():
            if value is None:
                continue
            quality = float(value)
            if not 0.0 <= quality <= 1.0:
                raise ValueError(f"{model}'s quality {quality} is outside 0-1")
            qualities[str(model)] = quality
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(
            f'{where}: expected {{"prompt": "...", "judged": {{model: quality 0-1 or null}}}} '
            f"({type(exc).__name__}: {exc})"
        ) from None
    return Judged(prompt, qualities)


def _fit(items: list[Judged], scorer: Scorer) -> list[ModelEvidence]:
    import numpy as np

    from gateway.training.fitting import fit_head, score_logits

    x = score_logits(np.asarray(scorer.score_many([i.prompt for i in items])))
    folds = np.asarray([fold_of(LabelledPrompt("", "custom", i.prompt, 0.0, 0.0)) for i in items])
    models = sorted({m for i in items for m in i.qualities})
    out = []
    for model in models:
        rows = np.asarray([n for n, i in enumerate(items) if model in i.qualities], dtype=np.int64)
        if len(rows) < MIN_JUDGED:
            continue
        y = np.asarray([items[n].qualities[model] for n in rows])
        losses, base_losses = [], []
        for k in range(FOLDS):
            train, test = folds[rows] != k, folds[rows] == k
            if not test.any() or train.sum() < 2:
                continue
            head = fit_head(x[rows][train], y[train])
            rate = float(np.clip(y[train].mean(), 1e-6, 1 - 1e-6))
            for value, target in zip(x[rows][test], y[test], strict=True):
                predicted = 1.0 / (1.0 + math.exp(-(head.bias + head.slope * float(value))))
                losses.append(_log_loss(predicted, float(target)))
                base_losses.append(_log_loss(rate, float(target)))
        out.append(
            ModelEvidence(
                model,
                len(rows),
                float(y.mean()),
                fit_head(x[rows], y),
                float(np.mean(losses)) if losses else math.nan,
                float(np.mean(base_losses)) if base_losses else math.nan,
            )
        )
    return out


def _log_loss(p: float, y: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return -(y * math.log(p) + (1 - y) * math.log(1 - p))


def _print(out: TextIO, evidence: list[ModelEvidence], path: Path, prompts: int) -> None:
    out.write(
        f"{prompts} judged prompts; per model, out-of-fold log-loss of its head against a "
        "head that knows only its base rate (lower is better)\n"
    )
    out.write(
        f"{'model':<28} {'prompts':>7} {'mean':>6} {'bias':>7} {'slope':>7} "
        f"{'head':>7} {'base rate':>9}\n"
    )
    for e in evidence:
        out.write(
            f"{e.model:<28} {e.prompts:7d} {e.mean_quality:6.3f} {e.head.bias:7.3f} "
            f"{e.head.slope:7.3f} {e.loss:7.4f} {e.base_rate_loss:9.4f}\n"
        )
    out.write(
        f"\nwrote {path}; in the route: learned.quality: {path}, and stand_ins mapping each "
        "route model to one of the models above\n"
    )
