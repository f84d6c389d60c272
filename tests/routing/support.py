"""A small, explicit catalog for planner tests, and builders for features and policies."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from gateway.routing.candidates import Plan
from gateway.routing.features import Overrides, RequestFeatures
from gateway.routing.policy_engine import plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.policy import Policy

NOON = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

# cheap < mid < wide < premium in price; quality rises with price except `wide` on code
MODELS: dict[str, Any] = {
    "cheap": {
        "aliases": ["tiny"],
        "deployments": [{"provider": "selfhost", "upstream_model": "cheap-8b"}],
        "prices": {"input": "0.10", "output": "0.20"},
        "context_window": 8000,
        "max_output_tokens": 2000,
        "capabilities": ["tools", "streaming"],
        "quality": {"general": 0.6, "code": 0.5},
    },
    "mid": {
        "deployments": [{"provider": "midco", "upstream_model": "mid-1"}],
        "prices": {"input": "0.50", "output": "1.50"},
        "context_window": 128000,
        "max_output_tokens": 8000,
        "capabilities": ["tools", "streaming", "json_schema"],
        "quality": {"general": 0.82, "code": 0.8},
    },
    "wide": {
        "deployments": [{"provider": "wideco", "upstream_model": "wide-1"}],
        "prices": {"input": "1.00", "output": "4.00"},
        "context_window": 1000000,
        "max_output_tokens": 64000,
        "capabilities": ["tools", "vision", "json_schema", "streaming"],
        "quality": {"general": 0.85, "code": 0.7},
    },
    "premium": {
        "deployments": [
            {"provider": "bigco", "upstream_model": "premium-1", "id": "bigco-a"},
            {"provider": "bigco-eu", "upstream_model": "premium-1", "id": "bigco-b"},
        ],
        "prices": {"input": "3.00", "output": "15.00"},
        "context_window": 200000,
        "max_output_tokens": 32000,
        "capabilities": ["tools", "vision", "json_schema", "reasoning", "streaming"],
        "quality": {"general": 0.95, "code": 0.95},
    },
}
ALL = ["cheap", "mid", "wide", "premium"]

ROUTES: dict[str, Any] = {
    "auto": {
        "strategy": "cheapest",
        "models": ALL,
        "min_quality": 0.8,
        "expected_output_tokens": 500,
    },
    "any": {"strategy": "cheapest", "models": ALL, "expected_output_tokens": 500},
    "best": {"strategy": "quality", "models": ALL, "max_cost_usd": "0.01"},
    "ordered": {"strategy": "ordered", "models": ["premium", "mid"], "fallbacks": ["cheap"]},
    "split": {"strategy": "weighted", "models": ["mid", "wide"], "weights": [3, 1]},
    "sticky": {
        "strategy": "weighted",
        "models": ["mid", "wide"],
        "weights": [1, 1],
        "sticky": True,
    },
    "fast": {"strategy": "latency", "models": ["mid", "wide", "premium"], "min_quality": 0.8},
    "code": {"strategy": "cheapest", "models": ALL, "task_class": "code", "min_quality": 0.8},
}


def build_policy(
    *,
    rules: list[dict[str, Any]] | None = None,
    tenants: dict[str, Any] | None = None,
    routes: dict[str, Any] | None = None,
    models: dict[str, Any] | None = None,
) -> Policy:
    return Policy.model_validate(
        {
            "models": MODELS if models is None else models,
            "routes": ROUTES if routes is None else routes,
            "tenants": tenants or {},
            "rules": rules or [],
        }
    )


def features(requested: str = "auto", **fields: Any) -> RequestFeatures:
    fields.setdefault("prompt_tokens", 1000)
    return RequestFeatures(requested=requested, **fields)


def overrides(
    route: str | None = None, min_quality: float | None = None, max_cost: str | None = None
) -> Overrides:
    return Overrides(
        route=route,
        min_quality=min_quality,
        max_cost_usd=None if max_cost is None else Decimal(max_cost),
    )


def run(
    policy: Policy,
    request: RequestFeatures,
    *,
    used: float = 0.0,
    stats: LiveStats | None = None,
    now: datetime = NOON,
) -> Plan:
    return plan(request, policy, TenantState(budget_used_fraction=used), stats or LiveStats(), now)


def models_of(result: Plan) -> list[str]:
    """Candidate models in order, each once."""
    out: list[str] = []
    for candidate in result.candidates:
        if candidate.model not in out:
            out.append(candidate.model)
    return out


def dropped_reasons(result: Plan) -> dict[str, str]:
    return {d.model: d.reason for d in result.dropped}
