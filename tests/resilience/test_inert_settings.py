"""`gateway check` refuses resilience settings that would do nothing, so an operator
never trusts a knob that is not connected to anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.settings.server import ProviderSettings

REPO = Path(__file__).resolve().parents[2]


def provider(**fields: Any) -> ProviderSettings:
    return ProviderSettings.model_validate({"kind": "openai", "base_url": "http://x", **fields})


INERT: list[tuple[dict[str, Any], str, str]] = [
    ({"retry": {"max_attempts": 1, "base_delay_seconds": 1}}, "memory", "retry.base_delay"),
    ({"retry": {"max_attempts": 1, "retry_non_idempotent": False}}, "memory", "retry.retry_non"),
    ({"retry": {"deadline_seconds": 90}, "timeouts": {"total": 30}}, "memory", "retry.deadline"),
    ({"timeouts": {"write": 5}}, "memory", "timeouts.write"),
    ({"breaker": {"sync_seconds": 0.5}}, "redis", "breaker.sync_seconds"),
    ({"breaker": {"shared": True}}, "memory", "breaker.shared"),
]


@pytest.mark.parametrize(("fields", "store", "named"), INERT)
def test_a_setting_that_does_nothing_is_named(
    fields: dict[str, Any], store: str, named: str
) -> None:
    found = provider(**fields).inert_settings(store)
    assert len(found) == 1
    assert found[0].startswith(named)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"retry": {"max_attempts": 3, "base_delay_seconds": 1, "deadline_seconds": 30}},
        {"retry": {"max_attempts": 1}},
        {"timeouts": {"write": 5}, "transport": "httpx"},
        {"breaker": {"shared": True, "sync_seconds": 0.5}},
    ],
)
def test_settings_that_act_pass(fields: dict[str, Any]) -> None:
    assert provider(**fields).inert_settings("redis") == []


def test_gateway_check_refuses_an_inert_setting_with_its_key_path(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("models: {}\n")
    (tmp_path / "config.yaml").write_text(
        "providers:\n"
        "  up:\n"
        "    kind: openai\n"
        "    base_url: http://127.0.0.1:1/v1\n"
        "    breaker: {shared: true}\n"
        "policies: [policy.yaml]\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli.main",
            "check",
            "--config",
            str(tmp_path / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 1
    assert "providers.up.breaker.shared: needs store.kind redis" in result.stderr
