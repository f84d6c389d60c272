"""Train the learned router's scorer from the shipped labelled data, reproducibly.

    .venv/bin/python -m training.ngram_v1            # writes the shipped weights file
    .venv/bin/python -m training.ngram_v1 --check    # retrains, compares with the shipped file

The data (`data/routing/`, from lm-sys/RouteLLM, Apache-2.0) holds MMLU, GSM8K and
MT-Bench prompts labelled with how a strong (GPT-4) and a weak model (Mixtral-8x7B) did.
The label is "the strong model did strictly better" (right where the weak one was wrong;
a higher MT-Bench judge grade), RouteLLM's strong-win framing. `Hyper.label = "gain"` is
the graded alternative measured in issue 20 (0.5 + 0.5 * the strong model's quality gain,
clipped; MT-Bench grade gaps on their own scale): it ranks slightly better within each
benchmark out-of-fold but needs far more strong calls under the one global threshold a
route has (docs/learned-routing.md), so it is not what ships. research/router_experiments.py
holds every label, weighting and feature choice compared. The model is a logistic
regression over hashed word n-grams (gateway/routing/learned/text_features.py), fitted by
full-batch Adam with a fixed seed and a fixed number of steps, so the same data gives the
same weights to float rounding.

Rows are split into K folds by a hash of their *group* (the first 300 characters of the
prompt: duplicates and MMLU questions sharing a reading passage land in the same fold).
The shipped model is trained on every fold but `HOLDOUT_FOLD`; that fold is what
`gateway route calibrate` calibrates thresholds on, and `out_of_fold_scores` scores
every fold with a model that never saw it (research/routing_quality.py, the gated
scorer's constants).

Needs numpy (a dev dependency); the gateway loads the weights without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.routing.learned.weights import SHIPPED_DIR, decode, encode
from gateway.training.fitting import (
    SPEC,
    Design,
    out_of_fold_logits,
    train_on,
    weights_header,
)
from gateway.training.labelled import (
    HOLDOUT_FOLD,
    SHIPPED_BENCHMARKS,
    SHIPPED_DATA,
    LabelledPrompt,
    fold_of,
    shipped_benchmarks,
)

DATA_DIR = SHIPPED_DATA
BENCHMARKS = SHIPPED_BENCHMARKS
SHIPPED_NAME = "ngram-v1"


def load_benchmarks(data_dir: Path = DATA_DIR) -> list[LabelledPrompt]:
    return shipped_benchmarks(data_dir)


def shipped_model_bytes(rows: Sequence[LabelledPrompt], design: Design) -> bytes:
    folds = np.asarray([fold_of(r) for r in rows])
    picks = np.flatnonzero(folds != HOLDOUT_FOLD).astype(np.int64)
    bias, weights = train_on(rows, design, picks)
    extra = weights_header(
        "data/routing (RouteLLM evals: mmlu, gsm8k, mt_bench)",
        "strong model strictly better than weak (GPT-4-1106 vs Mixtral-8x7B)",
        len(picks),
    )
    return encode(SHIPPED_NAME, SPEC, float(bias), array("f", weights.tobytes()), extra)


def out_of_fold_scores(rows: Sequence[LabelledPrompt]) -> npt.NDArray[np.float64]:
    """Each row's score from the shipped recipe trained on the other K-1 folds."""
    design = Design.build(rows, SPEC)
    folds = np.asarray([fold_of(r) for r in rows])
    logits = out_of_fold_logits(rows, design, folds, np.ones(len(rows), dtype=bool))
    return np.asarray(1.0 / (1.0 + np.exp(-logits)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR / f"{SHIPPED_NAME}.bin")
    parser.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = load_benchmarks()
    design = Design.build(rows, SPEC)
    built = shipped_model_bytes(rows, design)
    elapsed = time.perf_counter() - started
    if args.check:
        shipped = decode(args.out.read_bytes(), str(args.out))
        fresh = decode(built, "retrained")
        sample = [r.prompt for r in rows[::97]]
        worst = max(
            abs(a - b)
            for a, b in zip(shipped.score_many(sample), fresh.score_many(sample), strict=True)
        )
        print(f"retrained in {elapsed:.1f}s; {len(sample)} prompts scored by both")
        print(f"largest score difference: {worst:.2e}")
        return 0 if worst < 1e-4 else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(built)
    print(f"wrote {args.out} ({len(built)} bytes) in {elapsed:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
