"""`gateway route score`: one batch of JSON lines in, one line out per request, in order.

Each request is scored exactly as the gateway scores live traffic (the same text, the
same scorer) and then planned on the route, so `model` is what the route would pick.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec

from gateway.errors import GatewayError
from gateway.routing.candidates import Plan
from gateway.routing.features import StrongScore, extract_features, stable_hash
from gateway.routing.learned.scoring import ScorerSet, scoring_text, with_score
from gateway.routing.policy_engine import plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.policy import Policy
from gateway.settings.routes import LearnedSettings
from gateway.wire.openai import ChatRequest, request_decoder


def score_batch(
    lines: list[str],
    policy: Policy,
    route: str,
    learned: LearnedSettings,
    scorers: ScorerSet,
) -> tuple[list[str], bool]:
    """The output lines for `lines`, and whether any line failed (its output line then
    carries `error` instead of a score). `tier` is the tier of the model the route picks
    (for two-tier routes, the side of the threshold the score is on)."""
    scorer = scorers.get(learned.scorer)
    assert scorer is not None, "the caller checked that the route's scorer loaded"
    parsed: list[tuple[object, ChatRequest | str]] = [_parse(line, route) for line in lines]
    texts = [scoring_text(r) if isinstance(r, ChatRequest) else "" for _, r in parsed]
    scores = scorer.score_many(texts)
    now = datetime.now(UTC)
    out: list[str] = []
    failed = False
    for (ident, request), score in zip(parsed, scores, strict=True):
        if isinstance(request, str):
            out.append(_dumps({"id": ident, "error": request}))
            failed = True
            continue
        two_tier = learned.threshold is not None
        tier: str | None = None
        if two_tier:
            tier = "strong" if score >= learned.tier_threshold else "cheap"
        try:
            chosen = _plan(request, policy, scorers.scored(learned, score), now)
        except GatewayError as exc:
            out.append(_dumps({"id": ident, "score": score, "tier": tier, "error": str(exc)}))
            failed = True
            continue
        tier = tier if two_tier else chosen.learned_tier
        model = chosen.candidates[0].model
        out.append(_dumps({"id": ident, "score": round(score, 6), "tier": tier, "model": model}))
    return out, failed


def _parse(line: str, route: str) -> tuple[object, ChatRequest | str]:
    try:
        item = json.loads(line)
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(item, dict) or not isinstance(item.get("messages"), list):
        ident = item.get("id") if isinstance(item, dict) else None
        return ident, 'expected {"id": ..., "messages": [...]}'
    return item.get("id"), chat_request(route, item["messages"])


def chat_request(model: str, messages: object) -> ChatRequest | str:
    """`messages` decoded as the gateway decodes a chat request's, or why they cannot be
    (`route score` and `route label` read requests this way)."""
    body = json.dumps({"model": model, "messages": messages}).encode()
    try:
        return request_decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return f"messages are not valid chat messages: {exc}"


def _plan(request: ChatRequest, policy: Policy, score: StrongScore, now: datetime) -> Plan:
    seed = stable_hash(scoring_text(request))
    features = extract_features(request, {}, tenant=None, key_id=None, seed=seed)
    return plan(with_score(features, score), policy, TenantState(), LiveStats(), now)


def _dumps(item: dict[str, object]) -> str:
    return json.dumps(item, ensure_ascii=False) + "\n"
