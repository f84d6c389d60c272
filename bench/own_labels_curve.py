"""How many labels of your own traffic does `gateway route train` need before it ranks
that traffic better than a guess? The learning curve behind the labelling advice in
docs/learned-routing.md ("Training on your own traffic").

    .venv/bin/python bench/own_labels_curve.py            # ~15 min on this 2-core machine
    .venv/bin/python bench/own_labels_curve.py --sets oa_qlora --sizes 100,400

For each chat set (its rows stand in for one tenant's labelled traffic) and each size N:
every prompt of the set is scored by a model trained, as `route train` trains, on the
shipped benchmark labels plus N prompts drawn at random from the set's *other* folds
(grouped folds: a conversation's follow-ups stay together). The prompts scored are always
the whole set, so the rows differ only in how many labels trained the model. Each size is
drawn with several seeds; the table gives the pooled APGR of the first seed with its 95%
bootstrap interval, the strong share at 95% of strong quality, and the other seeds' APGRs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chat_holdout import CHAT_FILES, load_chat_training
from bench.train_router import BENCHMARKS
from gateway.training.fitting import (
    SPEC,
    Design,
    apgr,
    bootstrap_interval,
    logits_of,
    strong_share_at,
    train_on,
)
from gateway.training.labelled import FOLDS, LabelledPrompt, fold_of

SIZES = (50, 100, 200, 400)
Mask = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]
SEEDS = (1, 2, 3)


def curve(sets: list[str], sizes: list[int], seeds: list[int]) -> list[list[str]]:
    rows = load_chat_training()
    design = Design.build(rows, SPEC)
    benchmark = np.asarray([r.benchmark for r in rows])
    folds = np.asarray([fold_of(r) for r in rows])
    base = np.isin(benchmark, BENCHMARKS)
    table = [["set", "own labels", "APGR", "95% interval", "strong @95%", "other seeds"]]
    for name in sets:
        mine = benchmark == name
        strong = np.asarray([r.strong for r in rows])[mine]
        weak = np.asarray([r.weak for r in rows])[mine]
        gain = strong - weak
        zero = _scored(rows, design, base, mine, folds, gain, strong, weak)
        table.append([name, "0 (the shipped recipe)", *zero, "-"])
        available = min(int(np.sum(mine & (folds != k))) for k in range(FOLDS))
        for size in [s for s in sizes if s < available] + [available]:
            results = []
            for seed in seeds:
                rng = np.random.default_rng(seed)
                results.append(
                    _scored(rows, design, base, mine, folds, gain, strong, weak, size, rng)
                )
                if size == available:
                    break  # every other-fold row: the draw cannot differ
            first, *others = results
            label = f"{size}" + (" (all other folds)" if size == available else "")
            table.append([name, label, *first[:3], ", ".join(o[0] for o in others) or "-"])
            print(f"{name} {label}: {first[0]}", file=sys.stderr, flush=True)
    return table


def _scored(
    rows: list[LabelledPrompt],
    design: Design,
    base: Mask,
    mine: Mask,
    folds: npt.NDArray[np.int64],
    gain: Floats,
    strong: Floats,
    weak: Floats,
    size: int = 0,
    rng: np.random.Generator | None = None,
) -> list[str]:
    """Out-of-fold scores of the set's prompts with `size` own labels in training."""
    scores = np.full(len(rows), np.nan)
    for k in range(FOLDS):
        own = np.flatnonzero(mine & (folds != k))
        if size and rng is not None:
            own = np.sort(rng.choice(own, size=min(size, len(own)), replace=False))
        elif not size:
            own = own[:0]
        train = np.concatenate([np.flatnonzero(base & (folds != k)), own]).astype(np.int64)
        test = np.flatnonzero(mine & (folds == k)).astype(np.int64)
        bias, weights = train_on(rows, design, train)
        scores[test] = logits_of(design, test, bias, weights)
    mine_scores = scores[mine]
    low, high = bootstrap_interval(mine_scores, gain)
    share = strong_share_at(mine_scores, strong, weak)
    return [
        f"{apgr(mine_scores, gain):.3f}",
        f"{low:.3f}-{high:.3f}",
        "not reached" if share is None else f"{share:.1%}",
    ]


def render(table: list[list[str]]) -> str:
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(CHAT_FILES), help="chat sets, comma-separated")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="own-label counts")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="draws per size")
    args = parser.parse_args()
    sets = args.sets.split(",")
    unknown = sorted(set(sets) - set(CHAT_FILES))
    if unknown:
        parser.error(f"unknown sets {unknown}; choose from {', '.join(CHAT_FILES)}")
    table = curve(
        sets, [int(s) for s in args.sizes.split(",")], [int(s) for s in args.seeds.split(",")]
    )
    print(render(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
