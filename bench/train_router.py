"""Train the learned router's scorer from the shipped labelled data, reproducibly.

    .venv/bin/python bench/train_router.py            # writes the shipped weights file
    .venv/bin/python bench/train_router.py --check    # retrains, compares with the shipped file

The data (`data/routing/`, from lm-sys/RouteLLM, Apache-2.0) holds MMLU, GSM8K and
MT-Bench prompts labelled with how a strong (GPT-4) and a weak model (Mixtral-8x7B) did.
The label is "the strong model did strictly better" (right where the weak one was wrong;
a higher MT-Bench judge grade), RouteLLM's strong-win framing. `Hyper.label = "gain"` is
the graded alternative measured in issue 20 (0.5 + 0.5 * the strong model's quality gain,
clipped; MT-Bench grade gaps on their own scale): it ranks slightly better within each
benchmark out-of-fold but needs far more strong calls under the one global threshold a
route has (docs/learned-routing.md), so it is not what ships. bench/router_experiments.py
holds every label, weighting and feature choice compared. The model is a logistic
regression over hashed word n-grams (gateway/routing/learned/text_features.py), fitted by
full-batch Adam with a fixed seed and a fixed number of steps, so the same data gives the
same weights to float rounding.

Rows are split into K folds by a hash of their *group* (the first 300 characters of the
prompt: duplicates and MMLU questions sharing a reading passage land in the same fold).
The shipped model is trained on every fold but `HOLDOUT_FOLD`; that fold is what
`gateway route calibrate` calibrates thresholds on, and bench/routing_quality.py scores
every fold with a model that never saw it.

Needs numpy (a dev dependency); the gateway loads the weights without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.routing.learned.labelled import FOLD_SEED, FOLDS, LabelledPrompt, fold_of, parse_lines
from gateway.routing.learned.text_features import FeatureSpec, featurize
from gateway.routing.learned.weights import SHIPPED_DIR, decode, encode

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data" / "routing"
BENCHMARKS = ("mmlu", "gsm8k", "mt_bench")
HOLDOUT_FOLD = 0
SHIPPED_NAME = "ngram-v1"
SPEC = FeatureSpec()


@dataclass(frozen=True)
class Hyper:
    l2: float = 3e-5
    steps: int = 300
    learning_rate: float = 0.05
    # weight of each benchmark's rows relative to a uniform share (MMLU has 14k rows,
    # MT-Bench 72: without it the model learns MMLU alone)
    balance: float = 1.0
    # the target: "gain" = 0.5 + 0.5 * clip((strong - weak) / scale, -1, 1), so a prompt
    # the weak model wins ranks below a tie and a big MT-Bench grade gap counts more than a
    # small one (APGR sums the gaps); "binary" = strong strictly better (ngram-v1, shipped)
    label: str = "binary"
    # MT-Bench gaps are grades / 10 (mostly 0.05-0.5): their own scale
    mt_gain_scale: float = 0.15


HYPER = Hyper()


def target(row: LabelledPrompt, hyper: Hyper = HYPER) -> float:
    """The training label of one row, in [0, 1]."""
    gain = row.strong - row.weak
    if hyper.label == "binary":
        return 1.0 if gain > 0 else 0.0
    scale = hyper.mt_gain_scale if row.benchmark == "mt_bench" else 1.0
    return 0.5 + 0.5 * max(-1.0, min(1.0, gain / scale))


def load_benchmarks(data_dir: Path = DATA_DIR) -> list[LabelledPrompt]:
    rows: list[LabelledPrompt] = []
    for name in BENCHMARKS:
        path = data_dir / f"{name}.jsonl"
        rows += parse_lines(path.read_text(encoding="utf-8").splitlines(), str(path))
    return rows


@dataclass(frozen=True)
class Design:
    """A CSR matrix of features (rows x buckets) built once and reused by every fold."""

    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]

    @classmethod
    def build(cls, rows: Sequence[LabelledPrompt], spec: FeatureSpec) -> Design:
        indptr = [0]
        indices: list[int] = []
        values: list[float] = []
        for row in rows:
            features = featurize(row.prompt, spec)
            indices.extend(features)
            values.extend(features.values())
            indptr.append(len(indices))
        return cls(
            np.asarray(indptr, dtype=np.int64),
            np.asarray(indices, dtype=np.int64),
            np.asarray(values, dtype=np.float64),
        )

    def subset(self, picks: npt.NDArray[np.int64]) -> Design:
        starts, ends = self.indptr[picks], self.indptr[picks + 1]
        lengths = ends - starts
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Design(indptr, self.indices[take], self.values[take])

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1


def fit(
    design: Design,
    labels: npt.NDArray[np.float64],
    sample_weights: npt.NDArray[np.float64],
    tasks: npt.NDArray[np.int64],
    buckets: int,
    hyper: Hyper = HYPER,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32]]:
    """Weighted L2-regularised logistic regression by full-batch Adam: deterministic for
    the same inputs (no sampling; numpy's reductions are ordered).

    Each task (benchmark) gets its own unregularised intercept: it absorbs how often the
    strong model is needed on that benchmark as a whole, so the n-gram weights learn what
    makes one prompt harder than another *within* a task instead of learning to recognise
    which benchmark a prompt came from (live traffic is none of them). The shipped bias
    is the mean of the task intercepts."""
    row_of = np.repeat(np.arange(design.rows), np.diff(design.indptr))
    task_count = int(tasks.max()) + 1
    w = np.zeros(buckets)
    b = np.zeros(task_count)
    m_w, v_w = np.zeros(buckets), np.zeros(buckets)
    m_b, v_b = np.zeros(task_count), np.zeros(task_count)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    total = sample_weights.sum()
    for step in range(1, hyper.steps + 1):
        contributions = w[design.indices] * design.values
        logits = np.bincount(row_of, weights=contributions, minlength=design.rows)
        p = 1.0 / (1.0 + np.exp(-(logits + b[tasks])))
        residual = (p - labels) * sample_weights / total
        grad_w = np.bincount(
            design.indices, weights=residual[row_of] * design.values, minlength=buckets
        )
        grad_w += hyper.l2 * w
        grad_b = np.bincount(tasks, weights=residual, minlength=task_count)
        m_w = beta1 * m_w + (1 - beta1) * grad_w
        v_w = beta2 * v_w + (1 - beta2) * grad_w * grad_w
        m_b = beta1 * m_b + (1 - beta1) * grad_b
        v_b = beta2 * v_b + (1 - beta2) * grad_b * grad_b
        correction1, correction2 = 1 - beta1**step, 1 - beta2**step
        w -= hyper.learning_rate * (m_w / correction1) / (np.sqrt(v_w / correction2) + eps)
        b -= hyper.learning_rate * (m_b / correction1) / (np.sqrt(v_b / correction2) + eps)
    return b, w.astype(np.float32)


def balanced_weights(rows: Sequence[LabelledPrompt], balance: float) -> npt.NDArray[np.float64]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.benchmark] = counts.get(row.benchmark, 0) + 1
    share = len(rows) / len(counts)
    return np.asarray([(share / counts[r.benchmark]) ** balance for r in rows])


def train_on(
    rows: Sequence[LabelledPrompt],
    design: Design,
    picks: npt.NDArray[np.int64],
    spec: FeatureSpec = SPEC,
    hyper: Hyper = HYPER,
) -> tuple[float, npt.NDArray[np.float32]]:
    chosen = [rows[i] for i in picks]
    labels = np.asarray([target(r, hyper) for r in chosen])
    weights = balanced_weights(chosen, hyper.balance)
    names = sorted({r.benchmark for r in chosen})
    tasks = np.asarray([names.index(r.benchmark) for r in chosen], dtype=np.int64)
    biases, w = fit(design.subset(picks), labels, weights, tasks, spec.buckets, hyper)
    return float(biases.mean()), w


def shipped_model_bytes(rows: Sequence[LabelledPrompt], design: Design) -> bytes:
    folds = np.asarray([fold_of(r) for r in rows])
    picks = np.flatnonzero(folds != HOLDOUT_FOLD).astype(np.int64)
    bias, weights = train_on(rows, design, picks)
    extra = {
        "trained_on": "data/routing (RouteLLM evals: mmlu, gsm8k, mt_bench)",
        "label": "strong model strictly better than weak (GPT-4-1106 vs Mixtral-8x7B)",
        "bias_is": "the mean of the per-benchmark intercepts (fixed effects)",
        "folds": FOLDS,
        "holdout_fold": HOLDOUT_FOLD,
        "fold_seed": FOLD_SEED,
        "hyper": {
            "l2": HYPER.l2,
            "steps": HYPER.steps,
            "learning_rate": HYPER.learning_rate,
            "balance": HYPER.balance,
        },
        "training_rows": len(picks),
    }
    return encode(SHIPPED_NAME, SPEC, float(bias), array("f", weights.tobytes()), extra)


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
