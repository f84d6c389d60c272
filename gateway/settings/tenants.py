"""Tenants and their keys (`policies/tenants.yaml`)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Literal

from pydantic import Field, field_validator

from gateway.settings.base import Strict
from gateway.settings.catalog import RateLimitSettings
from gateway.settings.evaluation import EvaluationSettings
from gateway.settings.response_cache import CacheSettings

_KEY_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


class BudgetSettings(Strict):
    usd: Decimal = Field(gt=0)
    period: Literal["day", "month", "rolling"] = "month"
    rolling_seconds: int | None = Field(None, ge=60)
    # above this fraction of the budget: emit a metric and a log line
    soft_fraction: float | None = Field(None, gt=0, le=1)
    # above this fraction, switch to `downgrade_route` instead of a hard stop
    downgrade_fraction: float | None = Field(None, gt=0, le=1)
    downgrade_route: str | None = None


class KeySettings(Strict):
    id: str
    hash: str
    models: list[str] | None = None
    limits: RateLimitSettings | None = None
    budgets: list[BudgetSettings] = Field(default_factory=list)
    # exact-match response cache for this key's requests, on any route (wins over the
    # route's own `cache:`; `enabled: false` opts the key out)
    cache: CacheSettings | None = None

    @field_validator("hash")
    @classmethod
    def _hash_shape(cls, value: str) -> str:
        if not _KEY_HASH.match(value):
            raise ValueError(
                "expected 'sha256:' followed by 64 lowercase hex digits "
                "(print one with `gateway keys hash`)"
            )
        return value


class TenantSettings(Strict):
    keys: list[KeySettings] = Field(default_factory=list)
    limits: RateLimitSettings | None = None
    model_limits: dict[str, RateLimitSettings] = Field(default_factory=dict)
    budgets: list[BudgetSettings] = Field(default_factory=list)
    # may send x-gateway-route / x-gateway-min-quality / x-gateway-max-cost-usd
    allow_overrides: bool = False
    # opts this tenant's traffic into online evaluation (off unless set); its keys win
    # over the route's `evaluation:` (docs/evaluation.md)
    evaluation: EvaluationSettings | None = None
