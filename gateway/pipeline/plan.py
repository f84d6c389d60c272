"""Plan stage: which models and deployments may serve this request, in order."""

from __future__ import annotations

from gateway.errors import NotFound, PermissionDenied
from gateway.pipeline.flow import Candidate, Flow
from gateway.pipeline.keys import Caller
from gateway.pipeline.policy_view import PolicyView


def check_access(view: PolicyView, caller: Caller, name: str) -> None:
    known = view.model(name) is not None or name in view.policy.routes
    if not known:
        raise NotFound(
            f"The model '{name}' does not exist. GET /v1/models lists the models your key may use.",
            param="model",
        )
    if not view.allows(caller.key.models, name):
        raise PermissionDenied(
            f"Your key '{caller.key_id}' is not allowed to use the model '{name}'.",
            param="model",
        )


def plan_requested_model(flow: Flow) -> None:
    """A concrete model or alias: its deployments in configured order."""
    assert flow.request is not None
    name = flow.request.model
    flow.requested_model = name
    found = flow.view.model(name)
    if found is None:
        return
    model_name, model = found
    flow.route = name
    flow.route_reason = "requested"
    flow.candidates = [Candidate(model_name, model, d) for d in model.deployments]


def plan_route(flow: Flow) -> None:
    """A route of models in priority order (the `ordered` strategy)."""
    assert flow.request is not None
    name = flow.request.model
    route = flow.view.policy.routes[name]
    flow.requested_model = name
    flow.route = name
    flow.route_reason = route.strategy
    candidates: list[Candidate] = []
    for model_ref in [*route.models, *route.fallbacks]:
        found = flow.view.model(model_ref)
        if found is None:
            continue
        model_name, model = found
        candidates.extend(
            Candidate(model_name, model, d, reason="route") for d in model.deployments
        )
    flow.candidates = candidates
