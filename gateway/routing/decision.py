"""The routing decision being built for one request: which route, and the constraints
that rules, budgets and overrides put on it before candidates are ranked."""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

import msgspec
from msgspec.structs import replace

from gateway.errors import NotFound
from gateway.settings.policy import Policy
from gateway.settings.routes import RouteSettings


class Decision(msgspec.Struct, frozen=True):
    route_name: str
    route: RouteSettings
    # the client named a model, not a route: serve it as asked (no floor, no cost cap)
    concrete: bool
    # set by rules or overrides; None means the route's own value
    task_class_set: str | None = None
    min_quality_set: float | None = None
    max_cost_set: Decimal | None = None
    include_models: tuple[str, ...] = ()
    # (name, label of the rule that excluded it)
    excluded_models: tuple[tuple[str, str], ...] = ()
    excluded_providers: tuple[tuple[str, str], ...] = ()
    # (providers allowed, label of the rule) for each rule that restricted providers
    only_providers: tuple[tuple[frozenset[str], str], ...] = ()
    downgraded: bool = False
    rules: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def task_class(self) -> str:
        return self.task_class_set or self.route.task_class

    @property
    def min_quality(self) -> float | None:
        if self.concrete:
            return None
        return self.min_quality_set if self.min_quality_set is not None else self.route.min_quality

    @property
    def max_cost_usd(self) -> Decimal | None:
        if self.concrete:
            return None
        caps = [c for c in (self.route.max_cost_usd, self.max_cost_set) if c is not None]
        return min(caps) if caps else None

    def model_exclusion(self, model: str) -> str | None:
        """Why a rule excluded this model, or None."""
        for m, r in self.excluded_models:
            if m == model:
                return f"excluded by rule {r}"
        return None

    def provider_exclusion(self, provider: str) -> str | None:
        for name, rule in self.excluded_providers:
            if name == provider:
                return f"provider {provider} excluded by rule {rule}"
        for allowed, rule in self.only_providers:
            if provider not in allowed:
                return f"provider {provider} not allowed by rule {rule}"
        return None

    def noted(self, note: str) -> Decision:
        return replace(self, notes=(*self.notes, note))

    def on_route(self, policy: Policy, name: str, *, param: str | None = None) -> Decision:
        """The same constraints on another route (or concrete model)."""
        route_name, route, concrete = resolve(policy, name, param=param)
        return replace(self, route_name=route_name, route=route, concrete=concrete)


def start(policy: Policy, name: str, *, param: str | None = None) -> Decision:
    route_name, route, concrete = resolve(policy, name, param=param)
    return Decision(route_name=route_name, route=route, concrete=concrete)


def resolve(
    policy: Policy, name: str, *, param: str | None = None
) -> tuple[str, RouteSettings, bool]:
    """A route by name, or a concrete model (name or alias) as a route of one."""
    if name in policy.routes:
        return name, policy.routes[name], False
    model = canonical_model(policy, name)
    if model is None:
        routes = ", ".join(sorted(policy.routes)) or "none"
        models = ", ".join(sorted(policy.models)) or "none"
        raise NotFound(
            f"The model '{name}' does not exist. Routes: {routes}. Models: {models}.",
            param=param or "model",
        )
    return name, route_of_one(model), True


@lru_cache(maxsize=1024)
def route_of_one(model: str) -> RouteSettings:
    """The route a concrete model name stands for; settings are immutable, so one
    instance per model serves every request (building a pydantic model costs ~10 us)."""
    return RouteSettings(strategy="ordered", models=[model])


def canonical_model(policy: Policy, name: str) -> str | None:
    # Policy.canonical_model's body: a method call through pydantic's attribute hook
    # cost as much again, and the planner asks several times a request
    return policy.model_names.get(name)
