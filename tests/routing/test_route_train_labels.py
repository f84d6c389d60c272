"""`gateway route train --from-labels`: the labels export in, the three mends a trial of
50-label sets asked for (stratified out-of-fold calibration over every fold, weights
refit on every label, a graded target), and a file of another format refused by line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from gateway.cli.main import main
from gateway.routing.learned.weights import load_scorer
from gateway.training import fitting
from gateway.training.labelled import (
    FOLDS,
    HOLDOUT_FOLD,
    fold_of,
    parse_export_line,
    stratified_folds,
)
from tests.routing.learned_support import REPO

HELLOBENCH = REPO / "data" / "routing" / "hellobench.jsonl"


def export_line(item: dict[str, object], kind: str = "writing") -> str:
    """A line as `gateway route labels export` writes it."""
    return json.dumps(
        {
            "id": item["id"],
            "prompt": item["prompt"],
            "strong_quality": item["strong_quality"],
            "weak_quality": item["weak_quality"],
            "source": item.get("source", ""),
            "kind": kind,
            "route": "auto",
            "served_model": "cheap",
            "reference_model": "big",
        }
    )


def sampled_labels(seed: int, count: int = 50) -> list[str]:
    """`count` judged HelloBench labels (graded, the reference better on about 60%)."""
    rows = [json.loads(line) for line in HELLOBENCH.read_text().splitlines()]
    return [export_line(r) for r in random.Random(seed).sample(rows, count)]


def write(tmp_path: Path, lines: list[str], name: str = "labels.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def train(tmp_path: Path, labels: Path, *extra: str, flag: str = "--from-labels") -> Path:
    out = tmp_path / "tenant-router.bin"
    code = main(
        ["route", "train", flag, str(labels), "--out", str(out), "--without-shipped", *extra]
    )
    assert code in (0, 1)
    return out if code == 0 else Path("/nonexistent")


def test_fifty_label_sets_a_hash_fold_refuses_train_from_labels_on_every_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = {
        seed: [parse_export_line(line, "x") for line in sampled_labels(seed)] for seed in range(12)
    }
    small_hash_fold = [
        seed for seed, rows in sets.items() if sum(fold_of(r) == HOLDOUT_FOLD for r in rows) < 10
    ]
    # the trial's finding, reproduced: a good share of 50-label sets have a tiny hash fold
    assert len(small_hash_fold) >= 3, small_hash_fold
    for rows in sets.values():
        folds = stratified_folds(rows)
        assert sorted(set(folds)) == list(range(FOLDS))
        assert min(folds.count(k) for k in range(FOLDS)) == 10
    seed = small_hash_fold[0]
    labels = write(tmp_path, sampled_labels(seed))
    # --data refuses it for its held-out fold; --from-labels trains and calibrates on it
    assert train(tmp_path, labels, flag="--data") == Path("/nonexistent")
    assert "fall in the held-out fold" in capsys.readouterr().err
    out = train(tmp_path, labels)
    printed = capsys.readouterr().out
    assert out.exists(), printed
    header = load_scorer(str(out)).header
    calibration = header["calibration"]
    assert calibration["labels"] == 50 and calibration["target"] == 0.95
    assert calibration["low"] >= 0.95 and 0 < calibration["strong_share"] <= 1
    assert f"threshold {calibration['threshold']:.4f}" in printed
    evidence = header["evidence"]
    assert set(evidence) >= {"trained here (out of fold)", "prompt length", "random"}


def test_refit_all_writes_weights_that_saw_every_label_and_holdout_keeps_one_fold_out(
    tmp_path: Path,
) -> None:
    rows = [parse_export_line(line, "x") for line in sampled_labels(3, 100)]
    folds = stratified_folds(rows)
    lines = []
    for row, fold in zip(rows, folds, strict=True):
        item = {"id": row.id, "prompt": row.prompt, "strong_quality": row.strong,
                "weak_quality": row.weak}  # fmt: skip
        if fold == HOLDOUT_FOLD and row.strong > row.weak and len(row.prompt) > 400:
            # a word only the held-out fold has, where the reference did better; past the
            # first 300 characters, so the row keeps its fold
            item["prompt"] = f"{row.prompt} xylophonequest"
        lines.append(export_line(item))
    assert sum("xylophonequest" in line for line in lines) >= 3
    labels = write(tmp_path, lines)
    everything = train(tmp_path, labels)
    every_header = load_scorer(str(everything)).header
    # an unseen word of the same length: what a scorer says of a word it never saw
    unseen = "quqzwvjkpyrbnm"
    all_gap = load_scorer(str(everything)).score("xylophonequest") - load_scorer(
        str(everything)
    ).score(unseen)
    held = everything.with_name(everything.name + ".holdout.jsonl")
    assert not held.exists() and every_header["refit"] == "all"
    assert every_header["training_rows"] == 100 and every_header["holdout_fold"] is None

    kept_out = train(tmp_path, labels, "--refit", "holdout")
    scorer = load_scorer(str(kept_out))
    assert scorer.header["training_rows"] == 80 and scorer.header["holdout_fold"] == HOLDOUT_FOLD
    assert len(held.read_text().splitlines()) == 20
    # the held-out fold's word is unknown to the holdout recipe, learned by the refit
    assert scorer.score("xylophonequest") == pytest.approx(scorer.score(unseen))
    assert all_gap > 1e-3


def graded_lines(count: int = 120, seed: int = 5) -> list[str]:
    """Three kinds of prompt: the reference far better (alpha), a little better (beta),
    worse (gamma). "Strictly better" cannot tell alpha from beta; the graded target can."""
    rng = random.Random(seed)
    filler = ["please", "today", "team", "project", "client", "short", "note", "now"]
    lines = []
    for i in range(count):
        word, strong, weak = [("alpha", 1.0, 0.1), ("beta", 0.6, 0.5), ("gamma", 0.2, 0.8)][i % 3]
        prompt = f"{word} request {i} {' '.join(rng.sample(filler, 3))}"
        item = {"id": f"g{i}", "prompt": prompt, "strong_quality": strong, "weak_quality": weak}
        lines.append(export_line(item, kind="chat"))
    return lines


def test_the_ngram_trainer_learns_the_graded_gap_not_strictly_better(tmp_path: Path) -> None:
    lines = graded_lines()
    out = train(tmp_path, write(tmp_path, lines))
    scorer = load_scorer(str(out))
    assert scorer.header["label"].startswith("graded")
    rows = [parse_export_line(line, "x") for line in lines]
    alpha = [scorer.score(r.prompt) for r in rows if r.prompt.startswith("alpha")]
    beta = [scorer.score(r.prompt) for r in rows if r.prompt.startswith("beta")]
    gamma = [scorer.score(r.prompt) for r in rows if r.prompt.startswith("gamma")]
    assert min(alpha) > max(beta) > max(gamma) - 1e-9 and min(beta) > max(gamma)

    # the old binary target on the same rows cannot separate alpha from beta
    design = fitting.Design.build(rows, fitting.SPEC)
    picks = np.arange(len(rows), dtype=np.int64)
    bias, weights = fitting.train_on(rows, design, picks)
    logits = fitting.logits_of(design, picks, bias, weights)
    binary_alpha = logits[[i for i, r in enumerate(rows) if r.prompt.startswith("alpha")]]
    binary_beta = logits[[i for i, r in enumerate(rows) if r.prompt.startswith("beta")]]
    assert abs(float(binary_alpha.mean() - binary_beta.mean())) < 0.2 * float(
        binary_alpha.mean() - logits.min()
    )


def test_per_kind_evidence_says_where_the_score_helps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The graded rows as `chat` (the score ranks them) beside HelloBench as `writing`."""
    lines = graded_lines() + sampled_labels(1, 60)
    out = train(tmp_path, write(tmp_path, lines))
    printed = capsys.readouterr().out
    kinds = load_scorer(str(out)).header["kinds"]
    assert kinds["chat"]["helps"] is True and kinds["chat"]["threshold"] is not None
    assert kinds["chat"]["low"] > kinds["chat"]["length_apgr"]
    assert kinds["writing"]["labels"] == 60
    assert "measured route refinement: learned.kinds: {chat: " in printed


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (
            json.dumps({"id": "q", "prompt": "2+2", "strong_correct": 1, "weak_correct": 0}),
            "missing strong_quality, weak_quality",
        ),
        (
            json.dumps({"id": "q", "prompt": "p", "strong_quality": 1.5, "weak_quality": 0}),
            "strong_quality must be a number from 0 to 1, got 1.5",
        ),
        (
            json.dumps({"id": "q", "prompt": "p", "strong_quality": 1, "weak_quality": 0,
                        "kind": 3}),
            "kind must be a string",
        ),
        ("[1, 2]", "a JSON list, not an object"),
        ("not json", "not JSON"),
    ],
)  # fmt: skip
def test_a_file_of_another_format_is_refused_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, problem: str
) -> None:
    lines = sampled_labels(2)
    lines.insert(6, line)
    labels = write(tmp_path, lines, "exported.jsonl")
    assert train(tmp_path, labels) == Path("/nonexistent")
    err = capsys.readouterr().err
    assert f"exported.jsonl:7: not a line of `gateway route labels export` ({problem})" in err
    assert "Traceback" not in err
    assert not (tmp_path / "tenant-router.bin").exists()


def test_a_shipped_benchmark_file_is_not_a_labels_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gsm8k = REPO / "data" / "routing" / "gsm8k.jsonl"
    assert train(tmp_path, gsm8k) == Path("/nonexistent")
    assert f"{gsm8k}:1: not a line of `gateway route labels export`" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["0", "1.2", "-0.5"])
def test_a_quality_target_outside_0_1_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    labels = write(tmp_path, sampled_labels(2))
    assert train(tmp_path, labels, "--quality-target", target) == Path("/nonexistent")
    assert "--quality-target must be above 0 and at most 1" in capsys.readouterr().err
