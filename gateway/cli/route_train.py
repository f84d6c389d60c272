"""`gateway route train`: fit the learned scorer on a tenant's own labelled prompts.

The shipped scorer ranks exam-style questions, and open chat from a source it never saw
no better than a coin (docs/learned-routing.md, "Chat traffic, held out by source").
Trained on labels of your own traffic it does better on more of that traffic (the
bench's "trained on its own set" rows), so this command does what bench/train_router.py
does for the shipped file, on your files:

1. K-fold evidence: every labelled prompt scored by a model that never saw its fold,
   printed as APGR (bootstrap 95% interval) and the strong share at 95% of strong
   quality, beside prompt length, a coin and the shipped scorer;
2. the weights file, trained on every fold but the held-out one (plus the shipped
   benchmark labels unless --without-shipped), loadable as a route's `scorer: PATH`;
3. the held-out fold's lines, verbatim, beside it (`<out>.holdout.jsonl`), for
   `gateway route calibrate --data` to calibrate the threshold on prompts the model
   never saw.

Needs numpy (`pip install 'gateway[train]'`); serving never does.
"""

from __future__ import annotations

import argparse
import sys
from array import array
from pathlib import Path
from typing import Any, TextIO

from gateway.routing.learned.labelled import (
    FOLD_SEED,
    FOLDS,
    LabelError,
    LabelledPrompt,
    fold_of,
    parse_line,
    parse_lines,
)
from gateway.routing.learned.weights import WeightsError, encode, load_scorer

SHIPPED_DATA = Path(__file__).resolve().parents[2] / "data" / "routing"
SHIPPED_BENCHMARKS = ("mmlu", "gsm8k", "mt_bench")
HOLDOUT_FOLD = 0
# fewer than this and the K-fold numbers are noise; a side of the label with fewer rows
# than the minority minimum gives the model nothing to learn
MIN_ROWS = 50
MIN_MINORITY = 10


def register(actions: Any) -> None:
    train = actions.add_parser(
        "train",
        help="fit the learned scorer on your own labelled prompts (needs numpy)",
        description=__doc__.split("\n\n")[0],
    )
    train.add_argument(
        "--data",
        type=Path,
        action="append",
        required=True,
        metavar="FILE.jsonl",
        help="labelled prompts, the formats `route calibrate --data` reads (repeatable)",
    )
    train.add_argument("--out", type=Path, required=True, metavar="FILE.bin")
    train.add_argument(
        "--without-shipped",
        action="store_true",
        help="train on your files only (default: plus the shipped MMLU/GSM8K/MT-Bench labels)",
    )
    train.set_defaults(func=run_train)


class TrainingError(ValueError):
    """Input the command cannot train on; says why."""


def run_train(args: argparse.Namespace) -> int:
    try:
        from gateway.routing.learned import training
    except ImportError:
        print(
            "error: gateway route train needs numpy: pip install 'gateway[train]'",
            file=sys.stderr,
        )
        return 1
    try:
        own, lines = _read(args.data)
        _check(own)
        shipped = [] if args.without_shipped else _shipped_rows()
        report = _train(training, own, shipped, args.out, args.data)
        holdout = args.out.with_name(args.out.name + ".holdout.jsonl")
        kept = [line for row, line in zip(own, lines, strict=True) if fold_of(row) == HOLDOUT_FOLD]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(report.weights)
        holdout.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    except (LabelError, TrainingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _print(sys.stdout, report, args, holdout, len(kept))
    return 0


def _read(files: list[Path]) -> tuple[list[LabelledPrompt], list[str]]:
    rows: list[LabelledPrompt] = []
    lines: list[str] = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                rows.append(parse_line(line, f"{path}:{number}"))
                lines.append(line)
    return rows, lines


def _check(rows: list[LabelledPrompt]) -> None:
    if len(rows) < MIN_ROWS:
        raise TrainingError(f"{len(rows)} labelled prompts; training needs at least {MIN_ROWS}")
    needed = sum(1 for r in rows if r.strong > r.weak)
    sides = (("the strong model did better", needed), ("it did not", len(rows) - needed))
    for side, count in sides:
        if count < MIN_MINORITY:
            raise TrainingError(
                f"only {count} prompts where {side}; training needs at least {MIN_MINORITY} of each"
            )
    held = sum(1 for r in rows if fold_of(r) == HOLDOUT_FOLD)
    if held in (0, len(rows)):
        raise TrainingError("every prompt falls in one fold (duplicates?): nothing to hold out")


def _shipped_rows() -> list[LabelledPrompt]:
    rows: list[LabelledPrompt] = []
    for name in SHIPPED_BENCHMARKS:
        path = SHIPPED_DATA / f"{name}.jsonl"
        if not path.exists():
            raise TrainingError(
                f"the shipped labels ({path}) are not installed here: run from a checkout, "
                "or pass --without-shipped"
            )
        rows += parse_lines(path.read_text(encoding="utf-8").splitlines(), str(path))
    return rows


class Report:
    def __init__(self, weights: bytes, rows: list[tuple[str, float, float, float, float | None]]):
        self.weights = weights
        # router, APGR, interval low, high, strong share at 95%
        self.rows = rows


def _train(
    training: Any,
    own: list[LabelledPrompt],
    shipped: list[LabelledPrompt],
    out: Path,
    files: list[Path],
) -> Report:
    import numpy as np

    every = [*shipped, *own]
    design = training.Design.build(every, training.SPEC)
    folds = np.asarray([fold_of(r) for r in every])
    mine = np.zeros(len(every), dtype=bool)
    mine[len(shipped) :] = True
    scores = np.zeros(len(every))
    for k in range(FOLDS):
        train = np.flatnonzero(~mine | (folds != k)).astype(np.int64)
        test = np.flatnonzero(mine & (folds == k)).astype(np.int64)
        if len(test) == 0:
            continue
        bias, weights = training.train_on(every, design, train)
        scores[test] = training.logits_of(design, test, bias, weights)
    strong = np.asarray([r.strong for r in own])
    weak = np.asarray([r.weak for r in own])
    routers = {
        "trained here (out of fold)": scores[mine],
        "prompt length": np.asarray([float(len(r.prompt)) for r in own]),
        "random": np.zeros(len(own)),
    }
    try:
        shipped_scorer = load_scorer("ngram-v1")
        routers["shipped ngram-v1"] = np.asarray(shipped_scorer.score_many([r.prompt for r in own]))
    except WeightsError:
        pass
    table = []
    for name, values in routers.items():
        low, high = training.bootstrap_interval(values, strong - weak)
        table.append(
            (
                name,
                training.apgr(values, strong - weak),
                low,
                high,
                training.strong_share_at(values, strong, weak),
            )
        )
    # the shipped file's recipe: every fold but the held-out one
    picks = np.flatnonzero(folds != HOLDOUT_FOLD).astype(np.int64)
    bias, weights = training.train_on(every, design, picks)
    extra = {
        "trained_on": [str(p) for p in files]
        + ([] if not shipped else ["data/routing: mmlu, gsm8k, mt_bench"]),
        "label": "strong model strictly better than weak",
        "bias_is": "the mean of the per-benchmark intercepts (fixed effects)",
        "folds": FOLDS,
        "holdout_fold": HOLDOUT_FOLD,
        "fold_seed": FOLD_SEED,
        "training_rows": len(picks),
    }
    data = encode(out.stem, training.SPEC, float(bias), array("f", weights.tobytes()), extra)
    return Report(data, table)


def _print(out: TextIO, report: Report, args: argparse.Namespace, holdout: Path, held: int) -> None:
    out.write("out-of-fold on your prompts (each scored by a model that never saw its fold)\n")
    out.write(f"{'router':<28}  {'APGR':>5}  {'95% interval':>12}  {'strong @95%':>11}\n")
    for name, value, low, high, share in report.rows:
        at95 = "not reached" if share is None else f"{share:.1%}"
        out.write(f"{name:<28}  {value:5.3f}  {low:5.3f}-{high:5.3f}  {at95:>11}\n")
    out.write(
        f"\nwrote {args.out} (trained on every fold but {HOLDOUT_FOLD} of {FOLDS}) and "
        f"{holdout} ({held} held-out prompts)\n"
        "next: name it in the route (learned.scorer: PATH), then calibrate on the held-out "
        "prompts:\n"
        f"  gateway route calibrate --config CONFIG --route ROUTE --data {holdout} --quality 0.95\n"
    )
