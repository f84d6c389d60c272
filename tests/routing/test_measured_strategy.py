"""Routes that keep a quality target against a reference: strategy `measured` (each kind
to the cheapest model whose measured lower bound clears the target, per-kind score
refinement), the guard on `learned` routes, and their settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.routing.features import StrongScore, stable_hash
from gateway.routing.measured import ALL_KINDS, MeasuredQuality
from gateway.routing.quality_target import reference_share
from gateway.routing.state import LiveStats
from gateway.settings import SettingsError, load_settings
from tests.routing.support import MODELS, ROUTES, build_policy, features, models_of, run

KEPT: dict[str, Any] = {
    "strategy": "measured",
    "models": ["cheap", "mid", "premium"],
    "reference": "premium",
    "quality_target": 0.95,
    "expected_output_tokens": 500,
}
REFINED: dict[str, Any] = {
    **KEPT,
    "learned": {"scorer": "ngram-v1", "strong": ["premium"], "cheap": ["cheap"],
                "kinds": {"chat": 0.4}},
}  # fmt: skip
LEARNED_KEPT: dict[str, Any] = {
    "strategy": "learned",
    "models": ["cheap", "premium"],
    "reference": "premium",
    "quality_target": 0.95,
    "learned": {"strong": ["premium"], "cheap": ["cheap"], "threshold": 0.5},
}
POLICY = build_policy(
    routes={
        **ROUTES,
        "kept": KEPT,
        "refined": REFINED,
        "guarded": LEARNED_KEPT,
        "guarded-prior": {**LEARNED_KEPT, "unmeasured": "prior"},
    }
)


def measured(
    route: str, model: str, kind: str, ratio: float, low: float, samples: int = 200
) -> Any:
    key = (route, model, kind)
    return key, MeasuredQuality(route, model, kind, ratio, low, min(1.0, 2 * ratio - low), samples)


def stats(*entries: Any) -> LiveStats:
    return LiveStats(measured_quality=dict(entries))


def test_with_nothing_measured_the_reference_serves_and_the_route_says_unmeasured() -> None:
    result = run(POLICY, features("kept", request_kind="chat"))
    assert models_of(result) == ["premium", "cheap", "mid"]
    assert result.reason == "measured-chat-unmeasured-reference"
    assert result.quality_status == "unmeasured" and result.request_kind == "chat"


def test_each_kind_goes_to_the_cheapest_model_whose_lower_bound_clears_the_target() -> None:
    live = stats(
        measured("kept", "cheap", "code", 0.99, 0.97),
        measured("kept", "cheap", "chat", 0.97, 0.90),  # its ratio clears, its low does not
        measured("kept", "mid", "chat", 0.98, 0.96),
        measured("kept", "cheap", "writing", 0.85, 0.80),
        measured("kept", "mid", "math", 0.99, 0.98, samples=0),  # no samples: unmeasured
    )
    by_kind = {kind: run(POLICY, features("kept", request_kind=kind), stats=live)
               for kind in ("code", "chat", "writing", "math")}  # fmt: skip
    assert models_of(by_kind["code"])[0] == "cheap"
    assert by_kind["code"].reason == "measured-code-cheap-low-0.970"
    assert models_of(by_kind["chat"]) == ["mid", "cheap", "premium"]
    assert by_kind["chat"].reason == "measured-chat-mid-low-0.960"
    assert models_of(by_kind["writing"])[0] == "premium"
    assert by_kind["writing"].reason == "measured-writing-below-target-reference"
    assert by_kind["writing"].quality_status == "below-target"
    assert by_kind["math"].reason == "measured-math-unmeasured-reference"
    # the plan explains its first candidate
    assert by_kind["chat"].candidates[0].reason.startswith("measured-chat-mid-low-0.960, $")


def test_a_request_without_a_kind_looks_up_the_all_kinds_measurement() -> None:
    live = stats(measured("kept", "mid", ALL_KINDS, 0.99, 0.97))
    result = run(POLICY, features("kept"), stats=live)
    assert models_of(result)[0] == "mid" and result.reason == "measured-all-mid-low-0.970"
    # another route's measurement is not this route's
    other = stats(measured("auto", "mid", ALL_KINDS, 0.99, 0.97))
    assert models_of(run(POLICY, features("kept"), stats=other))[0] == "premium"


def test_when_the_reference_cannot_serve_the_cheapest_eligible_model_does_and_says_so() -> None:
    result = run(POLICY, features("kept", prompt_tokens=150_000, request_kind="chat"))
    # premium (200k) fits; cheap (8k) does not; mid (128k) does not
    assert models_of(result) == ["premium"]
    tools_only = build_policy(routes={"kept": {**KEPT, "models": ["cheap", "mid", "wide"],
                                               "reference": "wide"}})  # fmt: skip
    result = run(tools_only, features("kept", prompt_tokens=100, has_images=True))
    assert models_of(result) == ["wide"] and result.reason == "measured-all-unmeasured-reference"


def scored(value: float) -> StrongScore:
    return StrongScore("ngram-v1", value)


def test_a_score_refines_only_the_kinds_it_was_shown_to_help_and_only_below_the_threshold() -> None:
    easy = run(POLICY, features("refined", request_kind="chat", strong_score=scored(0.2)))
    assert models_of(easy)[0] == "cheap"
    assert easy.reason == "measured-chat-refined-score-0.200-below-0.400-cheap-labels"
    hard = run(POLICY, features("refined", request_kind="chat", strong_score=scored(0.6)))
    assert models_of(hard)[0] == "premium"
    # code has no threshold: the score says nothing there
    code = run(POLICY, features("refined", request_kind="code", strong_score=scored(0.01)))
    assert models_of(code)[0] == "premium" and "refined" not in code.reason
    # live evidence closes what the labels opened: the refined traffic measured below target
    below = stats(measured("refined", "cheap", "chat", 0.90, 0.85))
    closed = run(POLICY, features("refined", request_kind="chat", strong_score=scored(0.2)),
                 stats=below)  # fmt: skip
    assert models_of(closed)[0] == "premium"
    assert closed.reason == "measured-chat-below-target-reference"
    above = stats(measured("refined", "cheap", "chat", 0.97, 0.93))
    kept = run(POLICY, features("refined", request_kind="chat", strong_score=scored(0.2)),
               stats=above)  # fmt: skip
    assert kept.reason.endswith("-cheap-live-0.970") and models_of(kept)[0] == "cheap"


def test_the_share_moved_to_the_reference_brings_the_mix_back_to_the_target() -> None:
    assert reference_share(0.97, 0.95) == 0.0
    assert reference_share(0.90, 0.95) == pytest.approx(0.5)
    assert reference_share(0.0, 0.95) == pytest.approx(0.95)
    for ratio in (0.5, 0.8, 0.93):
        share = reference_share(ratio, 0.95)
        assert share + (1 - share) * ratio == pytest.approx(0.95)


def test_a_learned_route_with_no_measurement_serves_the_reference_unless_told_prior() -> None:
    cheap_score = scored(0.2)
    result = run(POLICY, features("guarded", strong_score=cheap_score))
    assert models_of(result) == ["premium", "cheap"]
    assert result.reason.endswith("+unmeasured-reference")
    assert result.quality_status == "unmeasured"
    prior = run(POLICY, features("guarded-prior", strong_score=cheap_score))
    assert models_of(prior)[0] == "cheap" and prior.reason.endswith("+unmeasured-prior")
    assert prior.quality_status == "unmeasured"
    # the strong tier chosen by the score is the reference: nothing to guard
    strong = run(POLICY, features("guarded", strong_score=scored(0.9)))
    assert models_of(strong)[0] == "premium" and strong.reason.endswith("+reference")


def test_a_learned_route_below_its_target_moves_that_share_toward_the_reference() -> None:
    met = stats(measured("guarded", "cheap", ALL_KINDS, 0.97, 0.94))
    result = run(POLICY, features("guarded", strong_score=scored(0.2)), stats=met)
    assert models_of(result)[0] == "cheap" and result.reason.endswith("+measured-0.970")
    below = stats(measured("guarded", "cheap", ALL_KINDS, 0.90, 0.86))
    plans = [run(POLICY, features("guarded", strong_score=scored(0.2), seed=seed), stats=below)
             for seed in range(600)]  # fmt: skip
    moved = [p for p in plans if models_of(p)[0] == "premium"]
    assert 0.44 < len(moved) / len(plans) < 0.56  # the share is 0.5
    assert all(p.quality_status == "below-target" for p in plans)
    assert moved[0].reason.endswith("+below-target-0.900-share-0.50-to-reference")
    assert moved[0].candidates[0].reason.startswith("quality target: below-target-0.900")
    # the same request (seed) always goes the same way, on every replica
    again = run(POLICY, features("guarded", strong_score=scored(0.2), seed=0), stats=below)
    assert models_of(again) == models_of(plans[0])
    # a request id seeds the guard's draw as its stable hash (hashed when drawn)
    for n in range(100):
        by_id = features("guarded", strong_score=scored(0.2), seed=f"req-{n}")
        by_hash = features("guarded", strong_score=scored(0.2), seed=stable_hash(f"req-{n}"))
        assert run(POLICY, by_id, stats=below) == run(POLICY, by_hash, stats=below)


def write_policy(tmp_path: Path, route: dict[str, Any]) -> Path:
    (tmp_path / "policy.yaml").write_text(
        yaml.safe_dump({"models": MODELS, "routes": {"kept": route}})
    )
    providers = {name: {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}
                 for name in ("selfhost", "midco", "wideco", "bigco", "bigco-eu")}  # fmt: skip
    config = tmp_path / "gateway.yaml"
    config.write_text(json.dumps({"providers": providers, "policies": ["policy.yaml"]}))
    return config


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ({**KEPT, "quality_target": 0}, "routes.kept.quality_target"),
        ({**KEPT, "quality_target": 1.5}, "routes.kept.quality_target"),
        ({**KEPT, "reference": None}, "strategy `measured` needs `quality_target` (0-1] and"),
        ({**KEPT, "reference": "mid-2"}, "reference: 'mid-2' must be one of the route's `models`"),
        ({**KEPT, "strategy": "cheapest"}, "quality_target: strategy `cheapest` does not choose"),
        ({"strategy": "cheapest", "models": ["cheap"], "reference": "nope"},
         "routes.kept.reference: unknown model 'nope'"),
        ({**KEPT, "unmeasured": "sometimes"}, "routes.kept.unmeasured"),
        ({**REFINED, "learned": {**REFINED["learned"], "kinds": {}}}, "needs `kinds`"),
        ({**REFINED, "learned": {**REFINED["learned"], "kinds": {"chat": 2}}},
         "a threshold is from 0 to 1 (chat)"),
        ({**LEARNED_KEPT, "learned": {**LEARNED_KEPT["learned"], "kinds": {"chat": 0.3}}},
         "per-kind thresholds need `strategy: measured`"),
    ],
)  # fmt: skip
def test_bad_quality_settings_are_errors_naming_the_file_and_key(
    tmp_path: Path, route: dict[str, Any], problem: str
) -> None:
    config = write_policy(tmp_path, route)
    with pytest.raises(SettingsError) as caught:
        load_settings(config)
    text = "\n".join(caught.value.problems)
    assert problem in text and str(tmp_path / "policy.yaml") in text, text


def test_a_good_quality_target_route_loads(tmp_path: Path) -> None:
    settings = load_settings(write_policy(tmp_path, REFINED))
    route = settings.policy.routes["kept"]
    assert route.quality_target == 0.95 and route.reference == "premium"
    assert route.unmeasured == "reference" and route.learned is not None
    assert route.learned.kinds == {"chat": 0.4}
