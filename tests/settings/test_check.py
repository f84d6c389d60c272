"""`gateway check` on good and broken YAML: every error names the file and key path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.settings import SettingsError, load_settings
from gateway.settings.interpolate import MissingVariable, interpolate

REPO = Path(__file__).resolve().parents[2]
GOOD_HASH = "sha256:" + "a" * 64

CONFIG = """
providers:
  up:
    kind: openai
    base_url: ${UPSTREAM_URL:-http://127.0.0.1:1/v1}
policies: [policy.yaml]
"""
POLICY = f"""
models:
  m1:
    aliases: [one]
    deployments: [{{provider: up, upstream_model: real-m1}}]
routes:
  auto: {{strategy: ordered, models: [m1]}}
tenants:
  t1:
    keys: [{{id: k1, hash: "{GOOD_HASH}"}}]
"""


def write(tmp_path: Path, config: str = CONFIG, policy: str = POLICY) -> Path:
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "policy.yaml").write_text(policy)
    return tmp_path / "config.yaml"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_good_config_prints_a_summary_and_exits_zero(tmp_path: Path) -> None:
    result = check(write(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "up: openai, http://127.0.0.1:1/v1" in result.stdout
    assert "m1 (aliases: one) -> up:real-m1" in result.stdout
    assert "auto: ordered over m1" in result.stdout
    assert "t1: 1 key(s)" in result.stdout


def test_shipped_dev_config_is_valid() -> None:
    result = check(REPO / "config" / "dev.yaml")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("config", "policy", "file", "expected"),
    [
        (
            CONFIG.replace("kind: openai", "kind: openai\n    colour: blue"),
            POLICY,
            "config.yaml",
            "providers.up.colour: unknown key",
        ),
        (
            CONFIG + "server: {port: many}\n",
            POLICY,
            "config.yaml",
            "server.port: Input should be a valid integer",
        ),
        (
            CONFIG.replace("${UPSTREAM_URL:-http://127.0.0.1:1/v1}", "${NOT_SET_ANYWHERE}"),
            POLICY,
            "config.yaml",
            "providers.up.base_url: environment variable NOT_SET_ANYWHERE is not set",
        ),
        (
            CONFIG,
            POLICY.replace(GOOD_HASH, "plaintext-key"),
            "policy.yaml",
            "tenants.t1.keys[0].hash: expected 'sha256:'",
        ),
        (
            CONFIG,
            POLICY.replace("provider: up", "provider: nowhere"),
            "policy.yaml",
            "models.m1.deployments[0].provider: unknown provider 'nowhere'",
        ),
        (
            CONFIG,
            POLICY.replace("models: [m1]", "models: [m9]"),
            "policy.yaml",
            "routes.auto.models[0]: unknown model 'm9'",
        ),
        (
            CONFIG,
            POLICY.replace("deployments: [", "deployments: [[["),
            "policy.yaml",
            "invalid YAML (line",
        ),
        (
            CONFIG,
            POLICY.replace("aliases: [one]", "aliases: [auto]"),
            "policy.yaml",
            "routes.auto: name is already used by model m1",
        ),
        (
            CONFIG,
            POLICY.replace("models: [m1]}", "models: [m1], max_tokens_over_limit: cap}"),
            "policy.yaml",
            "routes.auto.max_tokens_over_limit",
        ),
        (
            CONFIG.replace("kind: openai", "kind: openai\n    builtin_tools: ignore"),
            POLICY,
            "config.yaml",
            "providers.up.builtin_tools",
        ),
    ],
)
def test_broken_config_names_file_and_key_path(
    tmp_path: Path, config: str, policy: str, file: str, expected: str
) -> None:
    result = check(write(tmp_path, config, policy))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if expected in line]
    assert lines, result.stderr
    assert str(tmp_path / file) in lines[0]


def test_missing_policy_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(CONFIG)
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path / "config.yaml")
    assert caught.value.problems == [f"{tmp_path / 'policy.yaml'}: file not found"]


def test_secret_values_come_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG.replace("kind: openai", "kind: openai\n    api_key: ${K}"))
    settings = load_settings(path, env={"K": "sk-secret"})
    key = settings.config.providers["up"].api_key
    assert key is not None and key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(settings.config)


def test_interpolation_defaults_escapes_and_missing_variables() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert interpolate("${A}-${B:-two}-${EMPTY:-3}", env) == "1-two-3"
    assert interpolate({"x": ["$${A}"]}, env) == {"x": ["${A}"]}
    with pytest.raises(MissingVariable) as caught:
        interpolate({"outer": {"inner": "${NOPE}"}}, env)
    assert (caught.value.name, caught.value.path) == ("NOPE", "outer.inner")
