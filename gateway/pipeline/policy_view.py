"""One immutable snapshot of the policy with the lookup tables the hot path needs.

Hot reload builds a new view and swaps one reference; a request keeps the view it
started with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.admin.client_keys import KeyIndex
from gateway.admin.merge import RetiringKey
from gateway.routing.features import counting_limit
from gateway.settings.catalog import DeploymentSettings, ModelSettings
from gateway.settings.policy import Policy


@dataclass(frozen=True, slots=True)
class PolicyView:
    policy: Policy
    keys: KeyIndex
    # (model, deployment key) -> deployment, the key as the planner names it
    deployments: dict[tuple[str, str], DeploymentSettings] = field(default_factory=dict)
    # where a prompt count may stop (routing.features.counting_limit): once per policy,
    # not per request (None: count every token)
    counting_limit: int | None = None
    # the smallest context window in the catalog (None: no models)
    smallest_context_window: int | None = None
    # rules or budget downgrades exist: any request's plan may depend on the prompt's size
    # (pipeline/prompt_size)
    sized_planning: bool = True
    # some route or key has a `cache:` block (pipeline/response_cache): else the cache
    # stage is one attribute read
    caching: bool = False

    @classmethod
    def build(cls, policy: Policy, retiring: tuple[RetiringKey, ...] = ()) -> PolicyView:
        """`policy` with the runtime tenants merged in (admin/merge.py), and
        the old hashes of keys rotated within their grace."""
        deployments = {
            (name, deployment.key): deployment
            for name, model in policy.models.items()
            for deployment in model.deployments
        }
        windows = [model.context_window for model in policy.models.values()]
        return cls(
            policy,
            KeyIndex(policy, ((r.hash, r.tenant_id, r.key, r.valid_until) for r in retiring)),
            deployments,
            counting_limit(policy),
            smallest_context_window=min(windows) if windows else None,
            sized_planning=bool(policy.rules or policy.downgrade_routes),
            caching=any(route.cache is not None for route in policy.routes.values())
            or any(key.cache is not None for t in policy.tenants.values() for key in t.keys),
        )

    def deployment(self, model: str, deployment_id: str) -> DeploymentSettings:
        return self.deployments[model, deployment_id]

    def model(self, name: str) -> tuple[str, ModelSettings] | None:
        canonical = self.policy.model_names.get(name)  # (Policy.canonical_model's body)
        if canonical is None:
            return None
        return canonical, self.policy.models[canonical]

    def visible_names(self, allowed: list[str] | None) -> list[str]:
        """Model names, aliases and routes a key may ask for, for GET /v1/models."""
        names = [*self.policy.model_names, *self.policy.routes]
        if allowed is None:
            return names
        return [n for n in names if self.allows(allowed, n)]

    def allows(self, allowed: list[str] | None, name: str) -> bool:
        if allowed is None or name in allowed:
            return True
        canonical = self.policy.canonical_model(name)
        return canonical is not None and canonical in allowed
