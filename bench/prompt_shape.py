"""A prompt-shape head for chat: a few numbers about how a prompt is written (length,
lines, a question or an instruction, digits, capitals, code, first person...) and a
logistic regression over them, trained on the chat sets' per-prompt difficulty
(bench/chat_holdout.py `chat_targets`, every source weighing the same). Measured as a
row of bench/chat_holdout.py; not a scorer the gateway ships (docs/learned-routing.md
says why: it ranks AlpacaEval's held-out collections and nothing else, and it costs the
MMLU / GSM8K rows when added to ngram-v1).

    .venv/bin/python bench/prompt_shape.py     # the lambda trade-off table (~2 min)

The lambda table adds lambda times the head's logit to ngram-v1's: on AlpacaEval with
the head left out by collection, on the benchmarks out-of-fold with a head trained on
every chat source (MT-Bench's 72 prompts among them, so its row is not held out).

Caveat printed with the row: the features were picked by hand after looking at how each
single feature ranks AlpacaEval's five collections, so its AlpacaEval interval is an
optimistic one; OA and HelloBench (never looked at) are the honest check, and there it
is a coin flip.
"""

from __future__ import annotations

import math
import re

import numpy as np
import numpy.typing as npt

_WORD = re.compile(r"[A-Za-z0-9']+")
_QUESTION_START = re.compile(
    r"\s*(what|who|when|where|why|how|which|is|are|can|could|would|should|do|does|did|will)\b",
    re.IGNORECASE,
)
_MAKE = re.compile(r"\b(write|create|compose|generate|draft)\b", re.IGNORECASE)
_CODE = re.compile(r"```|\bdef |python|javascript|\bcode\b|sql|function", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(I|my|me|I'm)\b")
_SENTENCE_END = re.compile(r"[.!?](\s|$)")
_EXPLAIN = re.compile(r"\b(explain|describe|why)\b", re.IGNORECASE)
_LIST = re.compile(r"\b(list|give me|suggest|ideas?)\b", re.IGNORECASE)
_DIGIT = re.compile(r"\d")

FEATURES = (
    "log chars",
    "log lines",
    "has ?",
    "starts with a question word",
    "ends with ?",
    "log digits",
    "capital share",
    "mean word length",
    "asks to write/create",
    "mentions code",
    "first person",
    "log sentences",
    "explain/describe/why",
    "list/suggest/ideas",
    "has :",
    'has "',
)


def shape(prompt: str) -> list[float]:
    words = _WORD.findall(prompt)
    return [
        math.log1p(len(prompt)),
        math.log1p(prompt.count("\n")),
        float("?" in prompt),
        float(bool(_QUESTION_START.match(prompt))),
        float(prompt.rstrip().endswith("?")),
        math.log1p(len(_DIGIT.findall(prompt))),
        sum(c.isupper() for c in prompt) / max(1, len(prompt)),
        sum(len(w) for w in words) / len(words) if words else 0.0,
        float(bool(_MAKE.search(prompt))),
        float(bool(_CODE.search(prompt))),
        float(bool(_FIRST_PERSON.search(prompt))),
        math.log1p(len(_SENTENCE_END.findall(prompt))),
        float(bool(_EXPLAIN.search(prompt))),
        float(bool(_LIST.search(prompt))),
        float(":" in prompt),
        float('"' in prompt),
    ]


def shape_matrix(prompts: list[str]) -> npt.NDArray[np.float64]:
    return np.asarray([shape(p) for p in prompts], dtype=np.float64)


class ShapeHead:
    """Standardised features, L2-regularised logistic regression on soft targets in
    [0, 1], fitted by Newton's method: 17 parameters, deterministic."""

    def __init__(self, l2: float = 0.01, steps: int = 25) -> None:
        self.l2, self.steps = l2, steps
        self.mean = np.zeros(0)
        self.scale = np.ones(0)
        self.weights = np.zeros(0)

    def fit(
        self,
        x: npt.NDArray[np.float64],
        target: npt.NDArray[np.float64],
        weights: npt.NDArray[np.float64] | None = None,
    ) -> ShapeHead:
        """`weights`: each row's weight (so every source can weigh the same in all)."""
        self.mean, self.scale = x.mean(axis=0), x.std(axis=0) + 1e-9
        z = np.column_stack([np.ones(len(x)), (x - self.mean) / self.scale])
        sw = np.ones(len(x)) if weights is None else weights
        w = np.zeros(z.shape[1])
        penalty = np.full(z.shape[1], 2 * self.l2)
        penalty[0] = 0.0  # the intercept is not shrunk
        total = sw.sum()
        for _ in range(self.steps):
            p = 1.0 / (1.0 + np.exp(-(z @ w)))
            gradient = z.T @ ((p - target) * sw) / total + penalty * w
            hessian = (z.T * (p * (1 - p) * sw)) @ z / total + np.diag(penalty + 1e-9)
            w -= np.linalg.solve(hessian, gradient)
        self.weights = w
        return self

    def logits(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        z = np.column_stack([np.ones(len(x)), (x - self.mean) / self.scale])
        return np.asarray(z @ self.weights, dtype=np.float64)


def main() -> int:
    """The trade-off of adding the head to ngram-v1: ngram-v1's out-of-fold logit plus
    lambda times the head's logit, on the benchmarks (out-of-fold, as
    bench/routing_quality.py) and on AlpacaEval (head left out by collection)."""
    from bench.chat_holdout import (
        ALPACA_COLLECTIONS,
        load_chat_training,
        per_origin_weights,
        prompt_shape_scores,
        shape_training,
    )
    from bench.routing_quality import out_of_fold_scores
    from bench.train_router import BENCHMARKS, load_benchmarks
    from gateway.routing.learned.text_features import featurize
    from gateway.training.fitting import (
        SPEC,
        Design,
        apgr,
        bootstrap_interval,
        train_on,
    )

    benchmark_rows = load_benchmarks()
    probability = out_of_fold_scores(benchmark_rows)
    benchmark_logit = np.log(probability / (1 - probability))
    bias, weights = train_on(
        benchmark_rows,
        Design.build(benchmark_rows, SPEC),
        np.arange(len(benchmark_rows), dtype=np.int64),
    )
    rows = load_chat_training()
    collections = list(ALPACA_COLLECTIONS)
    # the left-out scores come per collection: put the rows in the same order
    chat = [r for source in collections for r in rows if r.origin == source]
    left_out = prompt_shape_scores(rows)
    head_chat = np.concatenate([left_out[source] for source in collections])
    chat_logit = np.asarray(
        [bias + sum(weights[k] * v for k, v in featurize(r.prompt, SPEC).items()) for r in chat]
    )
    chat_rows, x, target = shape_training(rows)
    head_all = ShapeHead().fit(x, target, per_origin_weights(chat_rows))
    head_benchmarks = head_all.logits(shape_matrix([r.prompt for r in benchmark_rows]))
    chat_gain = np.asarray([r.strong - r.weak for r in chat])
    names = np.asarray([r.benchmark for r in benchmark_rows])
    gains = np.asarray([r.strong - r.weak for r in benchmark_rows])
    print("ngram-v1 logit + lambda x prompt-shape head (APGR; benchmarks out-of-fold)")
    heading = "  ".join(f"{n:>8}" for n in BENCHMARKS)
    print(f"{'lambda':>6}  {'alpaca_eval (interval)':>24}  {heading}")
    for lam in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0):
        mixed = chat_logit + lam * head_chat
        low, high = bootstrap_interval(mixed, chat_gain)
        routed = benchmark_logit + lam * head_benchmarks
        per = "  ".join(f"{apgr(routed[names == n], gains[names == n]):8.3f}" for n in BENCHMARKS)
        print(f"{lam:6g}  {apgr(mixed, chat_gain):.3f} ({low:.3f}-{high:.3f})".ljust(34) + per)
    return 0


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
