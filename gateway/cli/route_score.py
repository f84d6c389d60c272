"""`gateway route score`: one batch of JSON lines in, one line out per request, in order.

Each request is scored exactly as the gateway scores live traffic (the same text, the
same scorer) and then planned on the route, so `model` is what the route would pick.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec

from gateway.errors import GatewayError
from gateway.routing.features import StrongScore, extract_features, stable_hash
from gateway.routing.learned.scoring import scoring_text, with_score
from gateway.routing.learned.weights import LinearScorer
from gateway.routing.planner import plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.policy import Policy
from gateway.settings.routes import LearnedSettings
from gateway.wire.openai import ChatRequest, request_decoder


def score_batch(
    lines: list[str],
    policy: Policy,
    route: str,
    learned: LearnedSettings,
    scorer: LinearScorer,
) -> tuple[list[str], bool]:
    """The output lines for `lines`, and whether any line failed (its output line then
    carries `error` instead of a score)."""
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
        tier = "strong" if score >= learned.threshold else "cheap"
        try:
            model: str | None = _first_model(request, policy, learned, score, now)
        except GatewayError as exc:
            out.append(_dumps({"id": ident, "score": score, "tier": tier, "error": str(exc)}))
            failed = True
            continue
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
    ident = item.get("id")
    body = json.dumps({"model": route, "messages": item["messages"]}).encode()
    try:
        return ident, request_decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return ident, f"messages are not valid chat messages: {exc}"


def _first_model(
    request: ChatRequest, policy: Policy, learned: LearnedSettings, score: float, now: datetime
) -> str:
    seed = stable_hash(scoring_text(request))
    features = extract_features(request, {}, tenant=None, key_id=None, seed=seed)
    features = with_score(features, StrongScore(learned.scorer, score))
    return plan(features, policy, TenantState(), LiveStats(), now).candidates[0].model


def _dumps(item: dict[str, object]) -> str:
    return json.dumps(item, ensure_ascii=False) + "\n"
