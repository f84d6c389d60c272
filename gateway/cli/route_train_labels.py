"""`gateway route train --from-labels`: fit the scorer on judged labels of your own traffic
(`gateway route labels export`), mending what a trial of `--data` on 50-label sets found:

1. folds are stratified (every fold the same size and mix of outcomes) and the evidence
   and the threshold come out of fold over *every* fold, so no set is refused because a
   hash-chosen fold held 4 prompts;
2. the written weights are refit on every label once that evidence is in (`--refit all`,
   the default; `--refit holdout` keeps the old recipe and its held-out file);
3. the n-gram target is graded: 0.5 + 0.5 * clip(reference - served, -1, 1), so a large
   gap counts more than a small one and a served-model win ranks below a tie.

It prints the out-of-fold evidence beside prompt length and a coin, the threshold that
keeps `--quality-target` of the reference's quality at the lower bound of its 95%
interval (out of fold), and per request kind whether the score helps there (its APGR
interval's lower bound above prompt length's APGR and a coin, on at least
MIN_KIND_LABELS labels of the kind): the `measured` strategy refines only those kinds.
The header of the weights file keeps all of it; `gateway route retrain` promotes on it.
"""

from __future__ import annotations

import argparse
import sys
from array import array
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from gateway.cli.fitting_input import InputError
from gateway.cli.route_train import (
    EvidenceRow,
    check_rows,
    evidence_rows,
    read_rows,
    shipped_rows,
)
from gateway.routing.learned.weights import encode
from gateway.training.labelled import (
    FOLDS,
    HOLDOUT_FOLD,
    LabelError,
    LabelledPrompt,
    fold_of,
    parse_export_line,
    stratified_folds,
)

# a kind's own evidence needs this many of its labels before it may refine routing
MIN_KIND_LABELS = 30
LENGTH_ROUTER = "prompt length"
TRAINED_ROUTER = "trained here (out of fold)"


@dataclass(frozen=True)
class KindEvidence:
    kind: str
    labels: int
    apgr: float
    low: float
    high: float
    length_apgr: float
    # the rule: low > max(length_apgr, 0.5) on at least MIN_KIND_LABELS labels
    helps: bool
    # the kind's own threshold for the quality target (only where it helps)
    threshold: float | None


@dataclass(frozen=True)
class FromLabels:
    weights: bytes
    evidence: list[EvidenceRow]
    calibration: Any  # fitting.TargetThreshold
    kinds: list[KindEvidence]
    refit: str
    training_rows: int
    holdout_lines: list[str]


def run_from_labels(args: argparse.Namespace) -> int:
    out: Path = args.out
    refit: str = args.refit or "all"
    holdout = out.with_name(out.name + ".holdout.jsonl")
    try:
        if out.suffix != ".bin":
            raise InputError(f"--out {out}: the weights file's name must end in .bin")
        if not 0 < args.quality_target <= 1:
            raise InputError(
                f"--quality-target must be above 0 and at most 1, got {args.quality_target}"
            )
        if args.words:
            raise InputError("--words trains on --data files; --from-labels fits the n-grams")
        own, lines = read_labels(args.from_labels)
        check_rows(own, hash_fold=False)
        shipped = [] if args.without_shipped else shipped_rows()
        trained = train_from_labels(
            out.stem, own, lines, shipped, args.from_labels, refit, args.quality_target, holdout
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        if refit == "holdout":
            holdout.write_text("".join(line + "\n" for line in trained.holdout_lines), "utf-8")
        out.write_bytes(trained.weights)
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    except (LabelError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print_trained(sys.stdout, trained, out, holdout)
    return 0


def read_labels(files: list[Path]) -> tuple[list[LabelledPrompt], list[str]]:
    """The labels export's lines (`gateway route labels export`), read strictly."""
    return read_rows(files, parse_export_line)


def train_from_labels(
    name: str,
    own: list[LabelledPrompt],
    lines: list[str],
    shipped: list[LabelledPrompt],
    files: list[Path],
    refit: str,
    quality_target: float,
    holdout: Path,
) -> FromLabels:
    import numpy as np

    from gateway.training import fitting

    # a shipped prompt one of yours repeats would be scored by a model that saw it
    yours = {r.group for r in own}
    shipped = [r for r in shipped if r.group not in yours]
    every = [*shipped, *own]
    design = fitting.Design.build(every, fitting.SPEC)
    folds = np.asarray([fold_of(r) for r in shipped] + stratified_folds(own))
    mine = np.zeros(len(every), dtype=bool)
    mine[len(shipped) :] = True
    logits = fitting.out_of_fold_logits(every, design, folds, mine, hyper=fitting.GRADED)
    out_of_fold = fitting.sigmoid_of(logits[mine])
    evidence = evidence_rows(own, out_of_fold)
    strong = np.asarray([r.strong for r in own])
    weak = np.asarray([r.weak for r in own])
    calibration = fitting.threshold_for_target(out_of_fold, strong, weak, quality_target)
    kinds = kind_evidence(own, out_of_fold, quality_target)

    own_folds = folds[mine]
    if refit == "all":
        picks = np.flatnonzero(np.ones(len(every), dtype=bool)).astype(np.int64)
        held_lines: list[str] = []
    else:
        picks = np.flatnonzero(folds != HOLDOUT_FOLD).astype(np.int64)
        held_lines = [line for line, k in zip(lines, own_folds, strict=True) if k == HOLDOUT_FOLD]
    bias, weights = fitting.train_on(every, design, picks, hyper=fitting.GRADED)
    trained_on = [str(p) for p in files] + (
        ["data/routing: mmlu, gsm8k, mt_bench"] if shipped else []
    )
    header: dict[str, object] = fitting.weights_header(
        trained_on,
        "graded: 0.5 + 0.5 * clip(reference quality - served quality, -1, 1)",
        len(picks),
        fitting.GRADED,
    )
    header |= {
        "folds_are": "stratified by outcome over groups (labelled.stratified_folds)",
        "refit": refit,
        "holdout_fold": HOLDOUT_FOLD if refit == "holdout" else None,
        "labels": len(own),
        "calibration": asdict(calibration),
        "evidence": _evidence_header(evidence),
        "kinds": {k.kind: asdict(k) for k in kinds},
    }
    if refit == "holdout":
        header["holdout_file"] = str(holdout.resolve())
    data = encode(name, fitting.SPEC, float(bias), array("f", weights.tobytes()), header)
    return FromLabels(data, evidence, calibration, kinds, refit, len(picks), held_lines)


def _evidence_header(rows: list[EvidenceRow]) -> dict[str, dict[str, float | None]]:
    """Each router's out-of-fold APGR and interval, as a promotion compares them."""
    return {
        row.router: {
            "apgr": row.evidence.apgr,
            "low": row.evidence.low,
            "high": row.evidence.high,
            "strong_at_95": row.evidence.strong_at_95,
        }
        for row in rows
    }


def kind_evidence(own: list[LabelledPrompt], out_of_fold: Any, target: float) -> list[KindEvidence]:
    """Per request kind: does the out-of-fold score rank that kind's prompts better than
    prompt length and a coin, and if so the kind's own threshold for the target."""
    import numpy as np

    from gateway.training import fitting

    out: list[KindEvidence] = []
    for kind in sorted({r.kind for r in own if r.kind}):
        picks = np.asarray([i for i, r in enumerate(own) if r.kind == kind])
        strong = np.asarray([own[i].strong for i in picks])
        weak = np.asarray([own[i].weak for i in picks])
        if len(picks) < MIN_KIND_LABELS or (strong - weak).sum() <= 0:
            nan = float("nan")
            out.append(KindEvidence(kind, len(picks), nan, nan, nan, nan, False, None))
            continue
        scores = out_of_fold[picks]
        mine = fitting.evidence(scores, strong, weak)
        length = fitting.apgr(np.asarray([float(len(own[i].prompt)) for i in picks]), strong - weak)
        helps = bool(mine.low > max(length, 0.5))
        threshold = (
            fitting.threshold_for_target(scores, strong, weak, target).threshold if helps else None
        )
        out.append(
            KindEvidence(kind, len(picks), mine.apgr, mine.low, mine.high, length, helps, threshold)
        )
    return out


def print_trained(out: TextIO, trained: FromLabels, path: Path, holdout: Path) -> None:
    out.write("out-of-fold on your labels (stratified folds, each scored by a model that never")
    out.write(" saw its fold)\n")
    out.write(f"{'router':<28}  {'APGR':>5}  {'95% interval':>12}  {'strong @95%':>11}\n")
    for row in trained.evidence:
        e = row.evidence
        at95 = "not reached" if e.strong_at_95 is None else f"{e.strong_at_95:.1%}"
        out.write(f"{row.router:<28}  {e.apgr:5.3f}  {e.low:5.3f}-{e.high:5.3f}  {at95:>11}\n")
    c = trained.calibration
    out.write(
        f"\nquality target {c.target:g} of the reference at the interval's lower bound (out of"
        f" fold, {c.labels} labels): threshold {c.threshold:.4f} -> reference share"
        f" {c.strong_share:.1%}, quality ratio {c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}]\n"
    )
    if trained.kinds:
        out.write("\nper kind (refines `measured` routes where it helps: interval low above")
        out.write(f" prompt length and a coin, >= {MIN_KIND_LABELS} labels)\n")
        for k in trained.kinds:
            if k.threshold is None and not k.helps and k.apgr != k.apgr:  # nan: too few
                out.write(f"  {k.kind:<12} {k.labels:>5} labels: too few to say\n")
                continue
            verdict = f"helps, threshold {k.threshold:.4f}" if k.helps else "does not help"
            out.write(
                f"  {k.kind:<12} {k.labels:>5} labels: APGR {k.apgr:.3f} [{k.low:.3f},"
                f" {k.high:.3f}] vs length {k.length_apgr:.3f}: {verdict}\n"
            )
    where = (
        f"refit on all {trained.training_rows} rows"
        if trained.refit == "all"
        else f"every fold but {HOLDOUT_FOLD} of {FOLDS}; held-out lines in {holdout}"
    )
    out.write(f"\nwrote {path} ({where})\n")
    out.write(f"route (learned.scorer: {path}, learned.threshold: {c.threshold:.4f})\n")
    helping = {k.kind: k.threshold for k in trained.kinds if k.helps and k.threshold is not None}
    if helping:
        kinds = ", ".join(f"{kind}: {t:.4f}" for kind, t in helping.items())
        out.write(f"measured route refinement: learned.kinds: {{{kinds}}}\n")
