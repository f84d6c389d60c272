"""The shipped catalog and routes: they load, carry the list prices, and route as documented."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gateway.routing.candidates import Plan
from gateway.routing.features import RequestFeatures
from gateway.routing.policy_engine import plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings import load_settings
from gateway.settings.policy import Policy
from gateway.usage import Usage

ROOT = Path(__file__).resolve().parents[2]
NOON = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MILLION = 1_000_000

CONFIG = """
providers:
  openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  anthropic: {kind: anthropic, base_url: "http://127.0.0.1:1"}
  gemini: {kind: gemini, base_url: "http://127.0.0.1:1"}
  deepseek: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  sglang: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
policies: [%s, %s]
"""


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    path = tmp_path_factory.mktemp("config") / "gateway.yaml"
    models, routes = ROOT / "policies" / "models.yaml", ROOT / "policies" / "routes.yaml"
    path.write_text(CONFIG % (models, routes), encoding="utf-8")
    return load_settings(path, env={}).policy


# (model, input, cached input, cache write, output) in USD per million tokens
LIST_PRICES = [
    ("gpt-4.1", "2.00", "0.50", "2.00", "8.00"),
    ("claude-sonnet-4.5", "3.00", "0.30", "3.75", "15.00"),
    ("gemini-2.5-flash", "0.30", "0.03", "0.30", "2.50"),
    ("deepseek-v3.2", "0.28", "0.028", "0.28", "0.42"),
]


@pytest.mark.parametrize(("model", "fresh", "cached", "written", "output"), LIST_PRICES)
def test_catalog_carries_the_list_prices(
    policy: Policy, model: str, fresh: str, cached: str, written: str, output: str
) -> None:
    prices = policy.models[model].prices
    n = 100_000  # below every long-context tier

    def per_million(usage: Usage) -> Decimal:
        return prices.cost_of(usage) * MILLION / n

    assert per_million(Usage(input_tokens=n)) == Decimal(fresh)
    assert per_million(Usage(input_tokens=n, cached_input_tokens=n)) == Decimal(cached)
    assert per_million(Usage(input_tokens=n, cache_write_tokens=n)) == Decimal(written)
    assert per_million(Usage(output_tokens=n)) == Decimal(output)


def test_claude_long_context_tier_applies_above_200k_input(policy: Policy) -> None:
    prices = policy.models["claude-sonnet-4.5"].prices
    usage = Usage(input_tokens=200_001, output_tokens=MILLION)
    assert prices.cost_of(usage) == Decimal("6.00") * 200_001 / MILLION + Decimal("22.50")


def test_every_model_scores_every_task_class(policy: Policy) -> None:
    for name, model in policy.models.items():
        if model.kind == "embedding":
            continue  # embedding models serve no task class
        assert set(model.quality) >= {"general", "code", "math", "extraction"}, name


def route(policy: Policy, name: str, now: datetime = NOON, **fields: Any) -> Plan:
    fields.setdefault("prompt_tokens", 400)
    return plan(RequestFeatures(requested=name, **fields), policy, TenantState(), LiveStats(), now)


SHAPES: list[tuple[str, str, dict[str, Any], str]] = [
    ("plain chat", "auto", {}, "deepseek-v3.2"),
    ("code", "auto", {"last_user_message": "refactor this:\n```py\nx=1\n```"}, "deepseek-v3.2"),
    ("image", "auto", {"has_images": True}, "gemini-2.5-flash"),
    ("json schema", "auto", {"json_mode": True, "json_schema": True}, "gemini-2.5-flash"),
    ("json object needs the extraction floor", "auto", {"json_mode": True}, "gemini-2.5-flash"),
    ("150k-token prompt: context fallback", "auto", {"prompt_tokens": 150_000}, "gemini-2.5-flash"),
    ("cheap general", "auto-cheap", {}, "llama-3.1-8b"),
    ("cheap with tools: no small model", "auto-cheap", {"has_tools": True}, "deepseek-v3.2"),
    (
        "cheap 40k prompt: past the GPU pool's window",
        "auto-cheap",
        {"prompt_tokens": 40_000},
        "deepseek-v3.2",
    ),
    ("best", "best", {}, "claude-sonnet-4.5"),
    ("a model by alias", "sonnet", {}, "claude-sonnet-4.5"),
]


@pytest.mark.parametrize(
    ("route_name", "fields", "expected"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES]
)
def test_shipped_routes_land_on_the_expected_model(
    policy: Policy, route_name: str, fields: dict[str, Any], expected: str
) -> None:
    assert route(policy, route_name, **fields).candidates[0].model == expected


def test_off_peak_rule_sends_general_auto_traffic_to_the_gpu_pool(policy: Policy) -> None:
    night = datetime(2026, 3, 2, 23, 0, tzinfo=UTC)
    result = route(policy, "auto", now=night)
    assert result.candidates[0].model == "llama-3.1-8b"
    assert "off-peak-self-hosted" in result.rules
