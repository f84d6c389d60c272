"""`gateway route score` and `gateway route --explain` on the learned route, and
retraining from the shipped data reproducing the shipped weights."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.metering.ledger_record import LedgerRecord
from gateway.routing.learned.weights import Scorer, load_scorer
from gateway.usage import Usage
from tests.routing.learned_support import EASY, HARD, REPO, shipped_policy
from tests.training.test_calibration import config_for


def auto_learned_scorer() -> Scorer:
    """The scorer the shipped `auto-learned` route names (a gated composite)."""
    learned = shipped_policy().routes["auto-learned"].learned
    assert learned is not None
    return load_scorer(learned.scorer)


def score_lines(
    tmp_path: Path,
    lines: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, list[dict[str, object]]]:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(line + "\n" for line in lines)))
    code = main(
        ["route", "score", "--config", str(config_for(tmp_path)), "--route", "auto-learned"]
    )
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines()]


def test_score_writes_one_line_per_request_in_input_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = [EASY, HARD, "hello", "Write a haiku about autumn.", "Prove that 2 is prime."] * 60
    lines = [
        json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": t}]})
        for i, t in enumerate(texts)
    ]
    code, out = score_lines(tmp_path, lines, monkeypatch, capsys)
    assert code == 0
    assert [o["id"] for o in out] == [f"r{i}" for i in range(len(texts))]
    route = shipped_policy().routes["auto-learned"]
    assert route.learned is not None
    scorer = auto_learned_scorer()
    for text, line in zip(texts, out, strict=True):
        score = scorer.score(text)
        assert line["score"] == pytest.approx(score, abs=1e-6)
        tier = "strong" if score >= route.learned.threshold else "cheap"
        assert line["tier"] == tier
        assert line["model"] == ("gpt-4.1" if tier == "strong" else "deepseek-v3.2")


def test_score_reports_a_bad_line_in_place_and_carries_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps({"id": 2, "messages": [{"role": "user", "content": "hi"}]})
    code, out = score_lines(
        tmp_path, ["{not json", '{"id": 1, "messages": "hi"}', good], monkeypatch, capsys
    )
    assert code == 1
    assert [o.get("id") for o in out] == [None, 1, 2]
    assert "not JSON" in str(out[0]["error"])
    assert "messages" in str(out[1]["error"])
    assert "score" in out[2] and "error" not in out[2]


def test_explain_shows_the_score_and_the_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "request.json"
    body.write_text(
        json.dumps({"model": "auto-learned", "messages": [{"role": "user", "content": HARD}]})
    )
    assert main(["route", "--config", str(config_for(tmp_path)), "--explain", str(body)]) == 0
    out = capsys.readouterr().out
    score = auto_learned_scorer().score(HARD)
    learned = shipped_policy().routes["auto-learned"].learned
    assert learned is not None
    assert f"score={score:.4f}" in out
    assert f"threshold={learned.threshold:.4f}" in out
    assert "reason=learned-" in out


def test_the_ledger_record_carries_the_score() -> None:
    record = LedgerRecord.settled(
        time=1.0, request_id="r", tenant="t", key_id="k", model="gpt-4.1", provider="openai",
        deployment="openai/gpt-4.1", status=200, usage=Usage(input_tokens=3, output_tokens=4),
        cost=Decimal("0.001"), route="auto-learned",
        route_score=0.61234, route_threshold=0.2744, route_scorer="ngram-v1",
    )  # fmt: skip
    data = json.loads(record.to_json())
    assert (data["route_score"], data["route_threshold"], data["route_scorer"]) == (
        0.61234,
        0.2744,
        "ngram-v1",
    )
    assert LedgerRecord.from_json(record.to_json()) == record
    # records written before the field existed still read
    del data["route_score"], data["route_threshold"], data["route_scorer"]
    assert LedgerRecord.from_json(json.dumps(data)).route_score is None


def test_retraining_from_the_shipped_data_reproduces_the_shipped_scores() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "train_router.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "largest score difference" in result.stdout
