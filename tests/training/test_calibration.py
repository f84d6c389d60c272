"""Calibration: the threshold `gateway route calibrate` prints sends exactly the share
it reports to the strong tier when the planner routes the same prompts with it."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from gateway.cli.main import main
from gateway.routing.features import StrongScore
from gateway.training.calibration import (
    Scored,
    point_at,
    share_at,
    threshold_for_quality,
    threshold_for_share,
)
from tests.routing.learned_support import REPO, shipped_policy, shipped_scorer
from tests.routing.support import features, run


# 200 unique floats are slow to draw on a loaded machine; the speed is not under test
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=200, unique=True),
    st.floats(0, 1),
)
def test_a_share_threshold_sends_that_many_distinct_scores_to_the_strong_tier(
    scores: list[float], share: float
) -> None:
    threshold = threshold_for_share(scores, share)
    assert share_at(scores, threshold) == round(share * len(scores)) / len(scores)


@settings(max_examples=50)
@given(st.integers(0, 2**32), st.floats(0.5, 1.0))
def test_the_quality_threshold_is_the_fewest_strong_calls_that_reach_the_target(
    seed: int, target: float
) -> None:
    rng = random.Random(seed)
    rows = [
        Scored(rng.choice("ab"), rng.random(), float(rng.random() < 0.8), float(rng.random() < 0.6))
        for _ in range(40)
    ]
    chosen = threshold_for_quality(rows, target)
    scores = [r.score for r in rows]
    # every smaller share misses the target (or the target is met by always-strong only)
    for k in range(round(chosen.strong_share * len(rows))):
        fewer = point_at(rows, threshold_for_share(scores, k / len(rows)))
        assert fewer.of_strong < target
    assert chosen.of_strong >= target - 1e-12 or chosen.strong_share == 1.0


def labelled_file(tmp_path: Path) -> Path:
    """40 GSM8K rows from the shipped data, in the shipped format."""
    lines = (REPO / "data" / "routing" / "gsm8k.jsonl").read_text().splitlines()[:40]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def config_for(tmp_path: Path, routes: Path = REPO / "policies" / "routes.yaml") -> Path:
    """A config over the shipped catalog and `routes` (the shipped routes by default),
    with every provider at an address that never answers."""
    config = tmp_path / "gateway.yaml"
    policies = [str(REPO / "policies" / "models.yaml"), str(routes)]
    providers = {
        name: {"kind": kind, "base_url": "http://127.0.0.1:9/v1"}
        for name, kind in [
            ("openai", "openai"),
            ("anthropic", "anthropic"),
            ("gemini", "gemini"),
            ("deepseek", "openai"),
            ("sglang", "openai"),
        ]
    }
    config.write_text(json.dumps({"providers": providers, "policies": policies}))
    return config


def test_the_printed_threshold_routes_the_printed_share_through_the_planner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = labelled_file(tmp_path)
    code = main(
        [
            "route", "calibrate", "--config", str(config_for(tmp_path)), "--route",
            "auto-learned", "--strong-share", "0.3", "--data", str(data),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    found = re.search(r"threshold (\d\.\d{4}) -> strong share (\d+\.\d)%", out)
    assert found is not None, out
    threshold, share = float(found.group(1)), float(found.group(2)) / 100
    assert share == pytest.approx(12 / 40)
    assert f"  threshold: {threshold:.4f}" in out

    policy = shipped_policy()
    route = policy.routes["auto-learned"]
    assert route.learned is not None
    policy = policy.model_copy(
        update={
            "routes": {
                **policy.routes,
                "auto-learned": route.model_copy(
                    update={"learned": route.learned.model_copy(update={"threshold": threshold})}
                ),
            }
        }
    )
    scorer = shipped_scorer()
    strong = 0
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for row in rows:
        request = replace(
            features("auto-learned", prompt_tokens=100),
            strong_score=StrongScore("ngram-v1", scorer.score(row["prompt"])),
        )
        strong += run(policy, request).candidates[0].model in ("gpt-4.1", "claude-sonnet-4.5")
    assert strong / len(rows) == pytest.approx(share, abs=0.0005)


def test_calibrate_reports_bad_data_and_non_learned_routes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "prompt": "no labels"}\n')
    config = str(config_for(tmp_path))
    args = ["route", "calibrate", "--config", config, "--strong-share", "0.5"]
    assert main([*args, "--route", "auto-learned", "--data", str(bad)]) == 1
    assert "bad.jsonl:1: expected a JSON object" in capsys.readouterr().err
    assert main([*args, "--route", "auto"]) == 1
    assert (
        "not a learned route (learned routes: auto-chat, auto-learned, auto-multi)"
        in capsys.readouterr().err
    )


def test_calibrate_reads_pairwise_chat_labels_and_reports_their_quality(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 60 AlpacaEval rows: `strong_quality` / `weak_quality` are who won the judge's
    # pairwise verdict, so always-strong quality is the strong model's win share
    lines = (REPO / "data" / "routing" / "alpaca_eval.jsonl").read_text().splitlines()[:60]
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(lines) + "\n")
    code = main(
        [
            "route", "calibrate", "--config", str(config_for(tmp_path)), "--route",
            "auto-learned", "--strong-share", "1.0", "--data", str(data),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    wins = sum(json.loads(line)["strong_quality"] for line in lines) / len(lines)
    # the curve's always-strong row: threshold, share 100%, quality, 100% of strong
    found = re.search(r"\s100\.0%\s+(\d\.\d{4})\s+100\.0%", out)
    assert found is not None, out
    assert float(found.group(1)) == pytest.approx(wins, abs=0.001)
