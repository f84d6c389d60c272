"""The `learned` strategy beyond two tiers (`choice: cheapest_above`): per-model quality
heads turn the score into predicted qualities, the cheapest model that reaches the
target serves first, the rest follow; config mistakes are named by file and key; the
shipped heads are what bench/train_quality.py fits from the shipped data."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.cli.main import main
from gateway.routing.explain import explain
from gateway.routing.learned.quality import (
    QualityHead,
    QualityHeads,
    decode_heads,
    encode_heads,
    load_heads,
)
from gateway.routing.learned.scoring import ScorerSet, load_scorers
from gateway.routing.learned.weights import WeightsError
from gateway.settings.loader import load_policy
from gateway.settings.routes import RouteSettings
from tests.routing.learned_support import EASY, HARD, REPO, shipped_policy, shipped_scorer
from tests.routing.support import NOON, build_policy, features, models_of, run
from tests.training.test_calibration import config_for

STAND_INS = {"cheap": "j-cheap", "mid": "j-mid", "wide": "j-wide", "premium": "j-premium"}
MULTI: dict[str, Any] = {
    "strategy": "learned",
    "models": ["cheap", "mid", "wide", "premium"],
    "learned": {
        "strong": ["wide", "premium"],
        "cheap": ["cheap", "mid"],
        "choice": "cheapest_above",
        "target": 0.6,
        "stand_ins": STAND_INS,
    },
}


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def constructed_heads(slopes: dict[str, float] | None = None, **bases: float) -> QualityHeads:
    """Heads whose prediction at score 0.5 (logit 0) is exactly the base given."""
    slopes = slopes or {}
    heads = {
        name: QualityHead(bias=logit(base), slope=slopes.get(name, 0.0))
        for name, base in bases.items()
    }
    return QualityHeads(name="constructed", scorer="test", heads=heads)


def planned(policy_routes: dict[str, Any], heads: QualityHeads, score: float) -> Any:
    policy = build_policy(routes=policy_routes)
    route = policy.routes["multi"].learned
    assert route is not None
    scorers = ScorerSet({}, {}, {route.quality: heads})
    return run(policy, features("multi", strong_score=scorers.scored(route, score)))


HEADS = constructed_heads(**{"j-cheap": 0.3, "j-mid": 0.5, "j-wide": 0.7, "j-premium": 0.9})


def test_the_cheapest_model_predicted_at_or_above_the_target_serves_first() -> None:
    result = planned({"multi": MULTI}, HEADS, 0.5)
    # wide is the cheapest reaching 0.6; premium also clears; then the misses, best first
    assert models_of(result) == ["wide", "premium", "mid", "cheap"]
    assert result.learned_tier == "strong"
    assert "predicted quality 0.700 >= target 0.600" in result.candidates[0].reason
    assert result.reason.startswith("learned-cheapest-above-0.600-score-0.500-predicted-")
    assert "wide:0.700" in result.reason and "cheap:0.300" in result.reason
    lower = {**MULTI, "learned": {**MULTI["learned"], "target": 0.45}}
    cheap_enough = planned({"multi": lower}, HEADS, 0.5)
    assert models_of(cheap_enough) == ["mid", "wide", "premium", "cheap"]
    assert cheap_enough.learned_tier == "cheap"


def test_the_score_moves_each_prediction_by_its_head() -> None:
    # mid gets worse as the score rises, so a hard prompt skips it for wide
    heads = constructed_heads(
        {"j-mid": -2.0}, **{"j-cheap": 0.3, "j-mid": 0.7, "j-wide": 0.8, "j-premium": 0.9}
    )
    assert models_of(planned({"multi": MULTI}, heads, 0.2))[0] == "mid"
    assert models_of(planned({"multi": MULTI}, heads, 0.8))[0] == "wide"


def test_when_no_model_reaches_the_target_the_best_predicted_serves_first() -> None:
    strict = {**MULTI, "learned": {**MULTI["learned"], "target": 0.95}}
    assert models_of(planned({"multi": strict}, HEADS, 0.5)) == ["premium", "wide", "mid", "cheap"]


def test_screening_and_fallbacks_compose_with_the_choice() -> None:
    route = {
        **MULTI,
        "models": ["cheap", "mid", "premium"],
        "fallbacks": ["wide"],
        "learned": {
            **MULTI["learned"],
            "strong": ["premium"],
            "stand_ins": {k: v for k, v in STAND_INS.items() if k != "wide"},
        },
    }
    result = planned({"multi": route}, HEADS, 0.5)
    assert [(c.model, c.fallback) for c in result.candidates][:1] == [("premium", False)]
    assert result.candidates[-1].model == "wide" and result.candidates[-1].fallback


def test_a_model_without_a_stand_in_follows_the_predicted_ones() -> None:
    partial = {
        **MULTI,
        "learned": {**MULTI["learned"], "stand_ins": {"mid": "j-mid", "premium": "j-premium"}},
    }
    result = planned({"multi": partial}, HEADS, 0.5)
    assert models_of(result) == ["premium", "mid", "cheap", "wide"]
    assert "no predicted quality" in result.candidates[-1].reason


def test_without_a_score_the_fallback_strategy_orders() -> None:
    policy = build_policy(routes={"multi": MULTI})
    result = run(policy, features("multi"))
    assert result.reason == "learned-not-scored+cheapest"
    assert models_of(result)[0] == "cheap" and result.learned_tier is None


@pytest.mark.parametrize(
    ("learned", "problem"),
    [
        ({"target": None}, "needs `target`"),
        ({"stand_ins": {}}, "needs `stand_ins`"),
        ({"threshold": 0.3}, "`threshold` only applies to `choice: two_tier`"),
        ({"target": 1.2}, "less than or equal to 1"),
        ({"choice": "cheapest"}, "'two_tier' or 'cheapest_above'"),
        ({"stand_ins": {"ghost": "j-mid"}}, "stand_ins name models not in `models`: ghost"),
    ],
)
def test_cheapest_above_settings_are_checked(learned: dict[str, Any], problem: str) -> None:
    block = {**MULTI["learned"], **learned}
    block = {k: v for k, v in block.items() if v is not None}
    with pytest.raises(ValidationError, match=problem):
        RouteSettings.model_validate({**MULTI, "learned": block})


def test_two_tier_settings_refuse_the_multi_model_keys() -> None:
    tiers = {"strong": ["wide"], "cheap": ["cheap"], "threshold": 0.4, "target": 0.5}
    with pytest.raises(ValidationError, match="target only apply to `choice: cheapest_above`"):
        RouteSettings.model_validate({**MULTI, "learned": tiers})
    with pytest.raises(ValidationError, match="needs `threshold`"):
        RouteSettings.model_validate({**MULTI, "learned": {"strong": ["wide"], "cheap": ["mid"]}})


def test_a_bad_block_in_a_policy_file_is_reported_with_the_file_and_key(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    bad = {**MULTI["learned"], "target": 3}
    routes.write_text(json.dumps({"routes": {"multi": {**MULTI, "learned": bad}}}))
    problems: list[str] = []
    models = REPO / "tests" / "routing" / "no-such-models.yaml"
    assert load_policy((models, routes), {}, problems) is None
    located = [p for p in problems if p.startswith(str(routes))]
    assert any("routes.multi.learned.target" in p for p in located), problems


def test_a_stand_in_the_heads_do_not_know_is_named_by_its_key() -> None:
    policy = shipped_policy()
    route = policy.routes["auto-multi"]
    assert route.learned is not None
    wrong = route.learned.model_copy(
        update={"stand_ins": {**route.learned.stand_ins, "gpt-4.1": "gpt-5"}}
    )
    broken = policy.model_copy(
        update={"routes": {"auto-multi": route.model_copy(update={"learned": wrong})}}
    )
    failed = load_scorers(broken).failed
    key = "routes.auto-multi.learned.stand_ins.gpt-4.1"
    assert key in failed and "'gpt-5' is not a model judged-v1 predicts" in str(failed[key])


def test_every_shipped_stand_in_has_a_shipped_head() -> None:
    policy = shipped_policy()
    assert load_scorers(policy).failed == {}
    route = policy.routes["auto-multi"].learned
    assert route is not None and route.choice == "cheapest_above"
    heads = load_heads(route.quality)
    assert set(route.stand_ins.values()) <= set(heads.heads)


def test_heads_files_round_trip_and_foreign_ones_are_refused(tmp_path: Path) -> None:
    again = decode_heads(encode_heads(HEADS), "round trip")
    assert again.heads == HEADS.heads
    for text in ("not json", json.dumps({"format": "other", "heads": {}})):
        with pytest.raises(WeightsError, match="not a quality-heads file"):
            decode_heads(text, "bad.json")
    with pytest.raises(WeightsError, match="cannot read quality heads"):
        load_heads(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(("name", "models"), [("judged-v1", 11), ("judged-v2", 23)])
def test_refitting_from_the_shipped_data_reproduces_the_shipped_heads(
    name: str, models: int
) -> None:
    sys.path.insert(0, str(REPO))
    from bench.train_quality import shipped_heads

    refit = shipped_heads(name)
    shipped = load_heads(name)
    assert set(refit.heads) == set(shipped.heads) and len(shipped.heads) == models
    for model, head in refit.heads.items():
        assert head.bias == pytest.approx(shipped.heads[model].bias, abs=1e-6)
        assert head.slope == pytest.approx(shipped.heads[model].slope, abs=1e-6)


def shipped_prediction(model: str, text: str) -> float:
    route = shipped_policy().routes["auto-multi"].learned
    assert route is not None
    heads = load_heads(route.quality)
    value = heads.predict(route.stand_ins[model], shipped_scorer().score(text))
    assert value is not None
    return value


def expected_first(text: str) -> str:
    """What the strategy's rule says for the shipped route, from the shipped heads."""
    route = shipped_policy().routes["auto-multi"].learned
    assert route is not None and route.target is not None
    by_cost = ["deepseek-v3.2", "gemini-2.5-flash", "gpt-4.1", "claude-sonnet-4.5"]
    predicted = {m: shipped_prediction(m, text) for m in by_cost}
    clearing = [m for m in by_cost if predicted[m] >= route.target]
    return clearing[0] if clearing else max(by_cost, key=lambda m: predicted[m])


def test_route_score_keeps_its_contract_on_a_multi_model_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = [EASY, HARD, "Write a haiku about autumn."]
    lines = [
        json.dumps({"id": i, "messages": [{"role": "user", "content": t}]})
        for i, t in enumerate(texts)
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    code = main(["route", "score", "--config", str(config_for(tmp_path)), "--route", "auto-multi"])
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    strong = {"gpt-4.1", "claude-sonnet-4.5"}
    for text, line in zip(texts, out, strict=True):
        assert set(line) == {"id", "score", "tier", "model"}
        assert line["score"] == pytest.approx(shipped_scorer().score(text), abs=1e-6)
        assert line["model"] == expected_first(text)
        assert line["tier"] == ("strong" if line["model"] in strong else "cheap")


def test_explain_shows_each_predicted_quality_and_the_target() -> None:
    body = json.dumps({"model": "auto-multi", "messages": [{"role": "user", "content": HARD}]})
    policy = shipped_policy()
    text = explain(policy, body.encode(), None, None, NOON, scorers=load_scorers(policy))
    assert "target=0.1800" in text
    for model in ("deepseek-v3.2", "gemini-2.5-flash", "gpt-4.1", "claude-sonnet-4.5"):
        assert f"{model}={shipped_prediction(model, HARD):.3f}" in text
    assert f"-> {expected_first(HARD)} first" in text


def test_calibrate_refuses_a_route_without_a_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["route", "calibrate", "--config", str(config_for(tmp_path)), "--route", "auto-multi"]
    assert main([*args, "--quality", "0.9"]) == 1
    assert "has no threshold to calibrate" in capsys.readouterr().err
