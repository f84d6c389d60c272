"""`evaluation:` blocks and feedback metrics in the policy: a bad one is refused at load
with the file and key path, as `gateway check` prints it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.settings import SettingsError, load_settings
from tests.settings.test_check import CONFIG, GOOD_HASH, REPO, write


def policy(route_evaluation: str = "", tenant_evaluation: str = "", extra: str = "") -> str:
    return f"""
models:
  m1:
    deployments: [{{provider: up, upstream_model: real-m1}}]
  big:
    deployments: [{{provider: up, upstream_model: real-big}}]
  embedder:
    kind: embedding
    deployments: [{{provider: up, upstream_model: real-embed}}]
routes:
  auto:
    models: [m1]
{route_evaluation}
tenants:
  t1:
    keys: [{{id: k1, hash: "{GOOD_HASH}"}}]
{tenant_evaluation}
{extra}
"""


ROUTE_GOOD = "    evaluation: {sample_rate: 0.1, reference: big, judge: big}"


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(SettingsError) as refused:
        load_settings(write(tmp_path, CONFIG, text))
    return refused.value.problems


def test_a_good_evaluation_block_loads(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            CONFIG,
            policy(
                ROUTE_GOOD,
                "    evaluation: {daily_usd: 2}",
                "feedback_metrics:\n  up: {type: boolean}",
            ),
        )
    )
    route = settings.policy.routes["auto"].evaluation
    assert route is not None and route.reference == "big" and route.sample_rate == 0.1
    assert settings.policy.feedback_metrics["up"].type == "boolean"


@pytest.mark.parametrize(
    ("route", "tenant", "key", "said"),
    [
        (
            "    evaluation: {reference: gpt-9, judge: big}",
            "",
            "routes.auto.evaluation.reference",
            "'gpt-9' is not a chat model in the catalog",
        ),
        (
            "    evaluation: {reference: big, judge: embedder}",
            "",
            "routes.auto.evaluation.judge",
            "'embedder' is not a chat model",
        ),
        (
            "    evaluation: {sample_rate: 1.5, reference: big, judge: big}",
            "",
            "routes.auto.evaluation.sample_rate",
            "less than or equal to 1",
        ),
        (
            "    evaluation: {sample_rate: -0.1, reference: big, judge: big}",
            "",
            "routes.auto.evaluation.sample_rate",
            "greater than or equal to 0",
        ),
        ("    evaluation: {reference: big}", "", "routes.auto.evaluation", "needs judge"),
        (
            ROUTE_GOOD,
            "    evaluation: {reference: nope}",
            "tenants.t1.evaluation.reference",
            "'nope' is not a chat model",
        ),
        (
            ROUTE_GOOD,
            "    evaluation: {charge_to: ghost}",
            "tenants.t1.evaluation.charge_to",
            "unknown tenant 'ghost'",
        ),
        (
            ROUTE_GOOD,
            "    evaluation: {daily_usd: 0}",
            "tenants.t1.evaluation.daily_usd",
            "greater than 0",
        ),
        (
            ROUTE_GOOD,
            "    evaluation: {sample: 0.5}",
            "tenants.t1.evaluation.sample",
            "unknown key",
        ),
    ],
)
def test_a_bad_evaluation_block_names_the_file_and_key(
    tmp_path: Path, route: str, tenant: str, key: str, said: str
) -> None:
    found = problems(tmp_path, policy(route, tenant))
    assert any(
        str(tmp_path / "policy.yaml") in p and f"{key}:" in p and said in p for p in found
    ), found


def test_a_feedback_metric_of_an_unknown_type_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, policy(extra="feedback_metrics:\n  stars: {type: integer}"))
    assert any("policy.yaml" in p and "feedback_metrics.stars.type" in p for p in found), found


def test_gateway_check_prints_the_problem(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG, policy("    evaluation: {reference: gpt-9, judge: big}"))
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode != 0
    assert (
        "routes.auto.evaluation.reference: 'gpt-9' is not a chat model"
        in result.stdout + result.stderr
    )


@pytest.mark.parametrize(
    ("block", "key", "said"),
    [
        ("{journal_lease_seconds: 0}", "evaluation.journal_lease_seconds", "greater than or equal"),
        ("{max_attempts: 0}", "evaluation.max_attempts", "greater than or equal"),
        ("{journal_max_jobs: 5}", "evaluation.journal_max_jobs", "greater than or equal"),
        ("{journal: maybe}", "evaluation.journal", "bool"),
    ],
)
def test_a_bad_journal_setting_names_the_file_and_key(
    tmp_path: Path, block: str, key: str, said: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(write(tmp_path, CONFIG + f"evaluation: {block}\n", policy(ROUTE_GOOD)))
    found = refused.value.problems
    assert any(
        str(tmp_path / "config.yaml") in p and f"{key}:" in p and said in p for p in found
    ), found


def test_the_journal_settings_load_with_their_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, CONFIG, policy(ROUTE_GOOD)))
    queue = settings.config.evaluation
    assert (queue.journal, queue.journal_lease_seconds, queue.max_attempts) == (None, 30.0, 3)
    tuned = load_settings(
        write(tmp_path, CONFIG + "evaluation: {journal: true, max_attempts: 5}\n", policy())
    )
    assert tuned.config.evaluation.journal is True and tuned.config.evaluation.max_attempts == 5
