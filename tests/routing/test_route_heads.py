"""`gateway route heads`: your judged prompts in, one quality head per model out (the
file a `cheapest_above` route names), with out-of-fold evidence against base rates; bad
input gets a clear error."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.routing.learned.quality import load_heads
from tests.routing.learned_support import EASY, HARD, shipped_scorer


def by_score() -> tuple[str, str]:
    """The two test prompts, the one the shipped scorer scores higher first (whichever
    that is: the test must not depend on the scorer being right)."""
    scorer = shipped_scorer()
    low, high = sorted((EASY, HARD), key=scorer.score)
    assert scorer.score(high) > scorer.score(low)
    return high, low


def judged_file(tmp_path: Path, count: int = 200, seed: int = 3) -> Path:
    """A small model that is poor where the score is high and good where it is low, a big
    model good on both, and a model judged too rarely to get a head."""
    high, low = by_score()
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        needs_big = i % 2 == 1
        small = (0.25 if needs_big else 0.9) + rng.uniform(-0.1, 0.1)
        judged = {"small": round(small, 3), "big": round(0.85 + rng.uniform(-0.1, 0.1), 3)}
        judged["rare"] = 0.5 if i < 10 else None
        prompt = f"{high if needs_big else low} (case {i})"
        lines.append(json.dumps({"prompt": prompt, "judged": judged}))
    path = tmp_path / "judged.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_heads_follow_what_the_score_says_of_each_model_and_beat_base_rates_out_of_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine-heads.json"
    code = main(["route", "heads", "--data", str(judged_file(tmp_path)), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    heads = load_heads(str(out))
    assert heads.scorer == "ngram-v1" and set(heads.heads) == {"small", "big"}
    # where the score is high only the small model's quality falls
    assert heads.heads["small"].slope < 0
    assert heads.heads["small"].slope < heads.heads["big"].slope
    high, low = (shipped_scorer().score(p) for p in by_score())
    at_low, at_high = heads.predict("small", low), heads.predict("small", high)
    assert at_low is not None and at_high is not None and at_low > at_high + 0.2
    row = re.search(r"^small\s+200\s+[\d.]+\s+[-\d.]+\s+[-\d.]+\s+([\d.]+)\s+([\d.]+)$",
                    printed, re.MULTILINE)  # fmt: skip
    assert row is not None, printed
    assert float(row.group(1)) < float(row.group(2))  # the head beats the base rate


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (["not json"], "judged.jsonl:1: expected"),
        (['{"prompt": "p", "judged": {"a": 3}}'], "a's quality 3.0 is outside 0-1"),
        (['{"prompt": "p", "judged": {"a": 0.5}}'] * 10, "10 judged prompts; fitting needs"),
    ],
)
def test_input_it_cannot_fit_gets_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], problem: str
) -> None:
    data = tmp_path / "judged.jsonl"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "heads.json"
    assert main(["route", "heads", "--data", str(data), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err
    assert not out.exists()


def test_an_unknown_scorer_and_an_out_name_a_route_cannot_read_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(judged_file(tmp_path))
    out = tmp_path / "heads.json"
    assert main(["route", "heads", "--data", data, "--out", str(out), "--scorer", "nope"]) == 1
    assert "cannot read router weights" in capsys.readouterr().err
    assert main(["route", "heads", "--data", data, "--out", str(tmp_path / "heads")]) == 1
    assert "must end in .json" in capsys.readouterr().err
    assert not out.exists()
