"""Plan stage: the routing policy decides which models and deployments may serve this
request, in order (gateway/routing does the deciding; this stage gathers its inputs and
checks the caller may use what it asked for)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from msgspec.structs import replace

from gateway.admin.client_keys import Caller
from gateway.errors import InvalidRequest, NotFound, PermissionDenied
from gateway.pipeline.flow import Flow, ServingOption
from gateway.pipeline.learned_scoring import LearnedScoring
from gateway.pipeline.policy_view import PolicyView
from gateway.routing.features import extract_features
from gateway.routing.learned.scoring import may_land_on_learned
from gateway.routing.policy_engine import overrides_allowed, plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.catalog import ModelSettings
from gateway.wire.apis import OPENAI_EMBEDDINGS


def check_access(view: PolicyView, caller: Caller, name: str, param: str = "model") -> None:
    known = view.model(name) is not None or name in view.policy.routes
    if not known:
        raise NotFound(
            f"The model '{name}' does not exist. GET /v1/models lists the models your key may use.",
            param=param,
        )
    if not view.allows(caller.key.models, name):
        raise PermissionDenied(
            f"Your key '{caller.key_id}' is not allowed to use the model '{name}'.",
            param=param,
        )


def check_kind(flow: Flow, models: list[ModelSettings]) -> None:
    """Embedding models serve /v1/embeddings and nothing else; chat models everything
    else (a route holds one kind, checked at load)."""
    assert flow.request is not None
    wants_embedding = flow.api == OPENAI_EMBEDDINGS
    if models and (models[0].kind == "embedding") != wants_embedding:
        if wants_embedding:
            message = f"'{flow.request.model}' is not an embedding model; /v1/embeddings needs one."
        else:
            message = (
                f"'{flow.request.model}' is an embedding model: call POST /v1/embeddings with it."
            )
        raise InvalidRequest(message, param="model", code="wrong_model_kind")


async def plan_request(
    flow: Flow,
    headers: Mapping[str, str],
    tenant_state: TenantState,
    live_stats: LiveStats,
    scoring: LearnedScoring | None = None,
    request_kind: Callable[[str], str] | None = None,
) -> None:
    """`request_kind`: the kind classifier (code, math, ...) for routes with a quality
    target, given the last user message; without it they look up their all-kinds
    measurement."""
    assert flow.request is not None and flow.caller is not None
    caller = flow.caller
    check_access(flow.view, caller, flow.request.model)
    features = extract_features(
        flow.request,
        headers,
        tenant=caller.tenant_id,
        key_id=caller.key_id,
        # the same request id picks the same way on every worker and replica (hashed only
        # by a plan that draws)
        seed=flow.request_id,
        prompt_tokens=(
            flow.prompt_tokens_bound
            if flow.prompt_tokens_estimate is None
            else flow.prompt_tokens_estimate
        ),
    )
    override = features.overrides.route
    if override is not None and overrides_allowed(flow.view.policy, caller.tenant_id):
        check_access(flow.view, caller, override, param="x-gateway-route")
    if request_kind is not None and flow.view.policy.keeps_quality:
        features = replace(features, request_kind=request_kind(features.last_user_message))
    now = datetime.now(UTC)
    if scoring is not None and may_land_on_learned(features, flow.view.policy):
        # learned routes only: the score is computed in a worker pool, then planning is pure
        # (the cheap pre-check first: most requests cannot land on one, and need no await)
        features = await scoring.attach(features, flow.request, flow.view.policy, tenant_state, now)
    decided = plan(features, flow.view.policy, tenant_state, live_stats, now)
    candidates = decided.candidates
    # (what check_kind reads: the first candidate's model)
    check_kind(flow, [flow.view.policy.models[candidates[0].model]] if candidates else [])
    flow.requested_model = flow.request.model
    flow.route = decided.route
    flow.route_reason = decided.reason
    flow.quality_status = decided.quality_status or ""
    if flow.prompt_tokens_bound is None:  # (planned with a count, not with the bound)
        flow.prompt_tokens_estimate = decided.prompt_tokens
    flow.route_score = decided.learned_score
    flow.route_threshold = decided.learned_threshold
    flow.route_scorer = decided.learned_scorer or ""
    flow.candidates = [
        ServingOption(
            model=c.model,
            settings=flow.view.policy.models[c.model],
            deployment=flow.view.deployment(c.model, c.deployment.id),
            reason=c.reason,
            expected_cost=c.expected_cost_usd,
            expected_output_tokens=c.expected_output_tokens,
            deployment_key=c.deployment.id,
        )
        for c in decided.candidates
    ]
