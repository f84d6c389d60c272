"""A policy file (`policies/*.yaml`): models, routes, tenants. Several files merge into one
:class:`Policy`; a name defined twice is an error."""

from __future__ import annotations

from functools import cached_property

from pydantic import Field

from gateway.settings.base import Strict
from gateway.settings.catalog import ModelSettings
from gateway.settings.evaluation import FeedbackMetricSettings
from gateway.settings.routes import RouteSettings, RuleSettings
from gateway.settings.tenants import TenantSettings


class PolicyFile(Strict):
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    # evaluated in order for every request; files' lists are concatenated in file order
    rules: list[RuleSettings] = Field(default_factory=list)
    # the metrics POST /v1/feedback accepts, by name
    feedback_metrics: dict[str, FeedbackMetricSettings] = Field(default_factory=dict)


class Policy(Strict):
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    # evaluated in order for every request; files' lists are concatenated in file order
    rules: list[RuleSettings] = Field(default_factory=list)
    # the metrics POST /v1/feedback accepts, by name
    feedback_metrics: dict[str, FeedbackMetricSettings] = Field(default_factory=dict)

    @cached_property
    def model_names(self) -> dict[str, str]:
        """Every model name and alias -> the model's name in the catalog."""
        names: dict[str, str] = {}
        for name, model in self.models.items():
            names[name] = name
            for alias in model.aliases:
                names.setdefault(alias, name)
        return names

    def canonical_model(self, name: str) -> str | None:
        return self.model_names.get(name)

    @cached_property
    def downgrade_routes(self) -> frozenset[str]:
        """The routes that budgets downgrade to: a request of any model may move onto one."""
        return frozenset(
            budget.downgrade_route
            for tenant in self.tenants.values()
            for budget in [*tenant.budgets, *(b for key in tenant.keys for b in key.budgets)]
            if budget.downgrade_route is not None
        )

    @cached_property
    def learned_routes(self) -> frozenset[str]:
        """The routes with a `learned:` block (read on every request: once per policy)."""
        return frozenset(name for name, route in self.routes.items() if route.learned is not None)

    @cached_property
    def learned_reachable(self) -> bool:
        """A rule or a budget downgrade could move any request onto a learned route."""
        learned = self.learned_routes
        if any(rule.then.route in learned for rule in self.rules):
            return True
        return not self.downgrade_routes.isdisjoint(learned)

    @cached_property
    def keeps_quality(self) -> bool:
        """Some route keeps a `quality_target`: requests need their kind classified."""
        return any(route.quality_target is not None for route in self.routes.values())
