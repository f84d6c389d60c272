"""A plan for people: the candidate table `gateway route --explain` prints, so a policy
change can be reviewed before it is deployed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import msgspec

from gateway.errors import InvalidRequest, NotFound
from gateway.json_body import decode_json_object
from gateway.routing.candidates import Plan
from gateway.routing.costing import usd
from gateway.routing.features import RequestFeatures, extract_features
from gateway.routing.learned.scoring import ScorerSet, attach_score_now
from gateway.routing.policy_engine import deployment_ref, plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.policy import Policy
from gateway.wire.openai import ChatRequest

_COLUMNS = ("#", "model", "deployment", "expected $", "quality", "decision")


def explain(
    policy: Policy,
    request_json: bytes,
    tenant: str | None,
    key_id: str | None,
    now: datetime,
    *,
    headers: Mapping[str, str] | None = None,
    tenant_state: TenantState | None = None,
    live_stats: LiveStats | None = None,
    seed: int = 0,
    scorers: ScorerSet | None = None,
) -> str:
    """Plan a chat request body without sending it and render the decision.

    Raises the planner's errors (NotFound, InvalidRequest) and InvalidRequest for a body
    that is not a valid chat request, NotFound for an unknown tenant. A request landing on
    a `learned` route is scored with `scorers` (without them it shows the fallback).
    """
    if tenant is not None and tenant not in policy.tenants:
        known = ", ".join(sorted(policy.tenants)) or "none"
        raise NotFound(f"unknown tenant '{tenant}' (tenants: {known})", param="tenant")
    try:
        request = msgspec.convert(decode_json_object(request_json), ChatRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"not a valid chat completion request: {exc}") from exc
    features = extract_features(request, headers or {}, tenant=tenant, key_id=key_id, seed=seed)
    state = tenant_state or TenantState()
    if scorers is not None:
        features = attach_score_now(features, request, policy, state, now, scorers)
    result = plan(features, policy, state, live_stats or LiveStats(), now)
    return render(result, features, policy)


def render(result: Plan, features: RequestFeatures, policy: Policy) -> str:
    lines = [
        *_summary(result, features),
        "",
        *_table([_COLUMNS, *_rows(result, policy)]),
    ]
    return "\n".join(lines) + "\n"


def _summary(result: Plan, features: RequestFeatures) -> list[str]:
    needs = ", ".join(sorted(features.required_capabilities)) or "nothing special"
    who = features.tenant or "(none)"
    if features.key_id:
        who += f" (key {features.key_id})"
    floor = "-" if result.min_quality is None else f"{result.min_quality:g}"
    cap = "-" if result.max_cost_usd is None else usd(result.max_cost_usd)
    out = [
        f"request:  model={features.requested}  prompt_tokens={features.prompt_tokens}  "
        f"max_tokens={features.max_tokens or '-'}  json_mode={_yes(features.json_mode)}  "
        f"needs: {needs}",
        f"tenant:   {who}",
        f"route:    {result.route}  strategy={result.strategy}  task_class={result.task_class}  "
        f"min_quality={floor}  max_cost={cap}",
        f"rules:    {', '.join(result.rules) or '(none matched)'}",
    ]
    if result.learned_threshold is not None or result.learned_target is not None:
        out.append(f"learned:  {_learned(result)}")
    if result.quality_status is not None:
        out.append(
            f"quality:  {result.quality_status} (kind {result.request_kind}; `gateway route` "
            "plans without live measurements: a serving replica has them)"
        )
    out += [f"note:     {note}" for note in result.notes]
    out.append(f"header:   x-gateway-route: {result.route_header()}")
    return out


def _learned(result: Plan) -> str:
    threshold = result.learned_threshold or 0.0
    scorer = result.learned_scorer or "-"
    if result.learned_target is not None:
        return _cheapest_above(result, scorer)
    if result.learned_score is None or result.learned_tier is None:
        return f"no score (scorer {scorer}), threshold={threshold:.4f}: fallback strategy orders"
    compare = ">=" if result.learned_tier == "strong" else "<"
    return (
        f"score={result.learned_score:.4f} {compare} threshold={threshold:.4f} -> "
        f"{result.learned_tier} tier first (scorer {scorer}; score = P(strong tier needed))"
    )


def _cheapest_above(result: Plan, scorer: str) -> str:
    target = result.learned_target or 0.0
    if result.learned_score is None:
        return f"no score (scorer {scorer}), target={target:.4f}: fallback strategy orders"
    predicted = "  ".join(f"{m}={q:.3f}" for m, q in result.learned_predicted) or "none"
    first = result.candidates[0].model
    return (
        f"score={result.learned_score:.4f} (scorer {scorer}); predicted quality: {predicted}; "
        f"cheapest at or above target={target:.4f} -> {first} first ({result.learned_tier} tier)"
    )


def _rows(result: Plan, policy: Policy) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for i, candidate in enumerate(result.candidates, start=1):
        rows.append(
            (
                str(i),
                candidate.model,
                candidate.deployment.id,
                usd(candidate.expected_cost_usd),
                _score(candidate.quality),
                f"kept: {candidate.reason}",
            )
        )
    for dropped in result.dropped:
        if dropped.deployment is not None:
            where = dropped.deployment.id
        else:
            where = ", ".join(
                deployment_ref(d).id for d in policy.models[dropped.model].deployments
            )
        cost = "-" if dropped.expected_cost_usd is None else usd(dropped.expected_cost_usd)
        rows.append(
            ("-", dropped.model, where, cost, _score(dropped.quality), f"dropped: {dropped.reason}")
        )
    return rows


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _score(quality: float | None) -> str:
    return "-" if quality is None else f"{quality:.2f}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
