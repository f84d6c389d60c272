"""Scoring before the plan: only learned routes are scored, in the worker pool, and a
scorer that is saturated, fails to load or raises leaves the request to the route's
fallback strategy, counted by reason."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.pipeline.learned_scoring import LearnedScoring
from gateway.routing.learned.scoring import ScorerSet, load_scorers
from gateway.routing.learned.weights import LinearScorer, WeightsError, load_scorer
from gateway.routing.state import TenantState
from gateway.settings.policy import Policy
from gateway.wire.openai import ChatRequest, request_decoder
from tests.routing.learned_support import HARD, shipped_scorer
from tests.routing.support import NOON, build_policy, features, run

TIERS: dict[str, Any] = {
    "strategy": "learned",
    "models": ["cheap", "premium"],
    "min_quality": 0.5,
    "learned": {"strong": ["premium"], "cheap": ["cheap"], "threshold": 0.0},
}


def request(text: str, model: str = "tiers") -> ChatRequest:
    body = f'{{"model": "{model}", "messages": [{{"role": "user", "content": "{text}"}}]}}'
    return request_decoder.decode(body.encode())


def policy_with(scorer: str) -> Policy:
    return build_policy(
        routes={
            "tiers": {**TIERS, "learned": {**TIERS["learned"], "scorer": scorer}},
            "any": {"strategy": "cheapest", "models": ["cheap", "premium"]},
        }
    )


async def attach(scoring: LearnedScoring, policy: Policy, model: str = "tiers") -> Any:
    scoring.load(policy)
    return await scoring.attach(features(model), request(HARD, model), policy, TenantState(), NOON)


def test_a_learned_route_is_scored_in_the_pool_with_the_shipped_scorer() -> None:
    calls: list[tuple[str, str]] = []
    scoring = LearnedScoring(on_fallback=lambda route, reason: calls.append((route, reason)))
    policy = policy_with("ngram-v1")
    try:
        scored = asyncio.run(attach(scoring, policy))
    finally:
        scoring.close()
    assert scored.strong_score is not None
    assert scored.strong_score.score == shipped_scorer().score(HARD)
    assert run(policy, scored).reason.startswith("learned-strong-score-")
    assert calls == []


def test_a_gated_scorer_is_scored_in_the_pool_like_a_single_file() -> None:
    scoring = LearnedScoring()
    policy = policy_with("ngram-chat-v1")
    try:
        scored = asyncio.run(attach(scoring, policy))
    finally:
        scoring.close()
    assert scored.strong_score is not None
    assert scored.strong_score.scorer == "ngram-chat-v1"
    assert scored.strong_score.score == load_scorer("ngram-chat-v1").score(HARD)
    assert scored.strong_score.score != shipped_scorer().score(HARD)


def test_other_routes_are_not_scored() -> None:
    scoring = LearnedScoring()
    try:
        unscored = asyncio.run(attach(scoring, policy_with("ngram-v1"), model="any"))
    finally:
        scoring.close()
    assert unscored.strong_score is None


def test_a_scorer_that_fails_to_load_falls_back_and_is_counted(tmp_path: Path) -> None:
    broken = tmp_path / "broken.bin"
    broken.write_bytes(b"not a weights file")
    calls: list[tuple[str, str]] = []
    scoring = LearnedScoring(on_fallback=lambda route, reason: calls.append((route, reason)))
    policy = policy_with(str(broken))
    try:
        result = asyncio.run(attach(scoring, policy))
    finally:
        scoring.close()
    assert str(broken) in scoring.scorers.failed
    assert result.strong_score is not None and result.strong_score.score is None
    assert calls == [("tiers", "unavailable")]
    planned = run(policy, result)
    assert planned.reason == "learned-unavailable+cheapest-meeting-0.5"
    assert planned.candidates[0].model == "cheap"


def test_truncated_and_foreign_weights_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    good = Path(__file__).resolve().parents[2] / "gateway/routing/learned/weights/ngram-v1.bin"
    data = good.read_bytes()
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="truncated"):
        load_scorer(str(truncated))
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(b"PK\x03\x04 not ours")
    with pytest.raises(WeightsError, match="bad magic"):
        load_scorer(str(foreign))
    with pytest.raises(WeightsError, match="cannot read"):
        load_scorer(str(tmp_path / "missing.bin"))
    assert set(load_scorers(policy_with(str(truncated))).failed) == {str(truncated)}


def test_a_saturated_pool_falls_back_instead_of_queueing() -> None:
    calls: list[tuple[str, str]] = []
    scoring = LearnedScoring(
        max_pending=0, on_fallback=lambda route, reason: calls.append((route, reason))
    )
    policy = policy_with("ngram-v1")
    try:
        result = asyncio.run(attach(scoring, policy))
    finally:
        scoring.close()
    assert result.strong_score is not None and result.strong_score.problem == "saturated"
    assert calls == [("tiers", "saturated")]
    assert run(policy, result).reason == "learned-saturated+cheapest-meeting-0.5"


def test_a_scorer_that_raises_falls_back() -> None:
    calls: list[tuple[str, str]] = []
    scoring = LearnedScoring(on_fallback=lambda route, reason: calls.append((route, reason)))
    policy = policy_with("ngram-v1")
    scoring.load(policy)
    loaded = scoring.scorers.get("ngram-v1")
    assert loaded is not None
    # weights shorter than the feature space: the scorer raises IndexError mid-request
    # (a copy: loaded scorers are shared by everything that loads the same file)
    scoring.scorers.loaded["ngram-v1"] = replace(loaded, weights=loaded.weights[:16])
    try:
        result = asyncio.run(
            scoring.attach(features("tiers"), request(HARD), policy, TenantState(), NOON)
        )
    finally:
        scoring.close()
    assert result.strong_score is not None and result.strong_score.problem == "failed"
    assert calls == [("tiers", "failed")]
    assert run(policy, result).candidates[0].model == "cheap"


def test_a_rule_that_moves_a_request_onto_a_learned_route_gets_it_scored() -> None:
    policy = build_policy(
        routes={
            "tiers": TIERS,
            "any": {"strategy": "cheapest", "models": ["cheap", "premium"]},
        },
        rules=[{"when": {"headers": {"x-team": "research"}}, "then": {"route": "tiers"}}],
    )
    scoring = LearnedScoring()
    scoring.load(policy)

    async def both() -> tuple[Any, Any]:
        moved = features("any", headers={"x-team": "research"})
        stayed = features("any")
        return (
            await scoring.attach(moved, request(HARD, "any"), policy, TenantState(), NOON),
            await scoring.attach(stayed, request(HARD, "any"), policy, TenantState(), NOON),
        )

    try:
        moved, stayed = asyncio.run(both())
    finally:
        scoring.close()
    assert moved.strong_score is not None and moved.strong_score.score is not None
    assert run(policy, moved).route == "tiers"
    assert stayed.strong_score is None


def texts(n: int) -> list[str]:
    return [f"{HARD} Variant {i}: show each step for {i} apples." for i in range(n)]


def test_the_prompts_of_one_loop_turn_go_to_the_pool_as_one_job() -> None:
    """A burst of learned requests arriving together costs one hop to the worker thread
    and back, not one each; every request still gets its own prompt's score."""
    scoring = LearnedScoring()
    policy = policy_with("ngram-v1")
    scoring.load(policy)
    prompts = texts(16)

    async def burst() -> tuple[list[Any], int]:
        loop = asyncio.get_running_loop()
        hops = 0
        hop = loop.run_in_executor

        def counted(*args: Any) -> Any:
            nonlocal hops
            hops += 1
            return hop(*args)

        loop.run_in_executor = counted  # type: ignore[method-assign, assignment]
        scored = await asyncio.gather(
            *(
                scoring.attach(features("tiers"), request(p), policy, TenantState(), NOON)
                for p in prompts
            )
        )
        return scored, hops

    try:
        scored, hops = asyncio.run(burst())
    finally:
        scoring.close()
    assert hops == 1
    shipped = shipped_scorer()
    assert [s.strong_score.score for s in scored] == [shipped.score(p) for p in prompts]
    assert len({s.strong_score.score for s in scored}) > 1  # each its own prompt's


class PickyScorer(LinearScorer):
    """The shipped weights, raising on one kind of prompt: what a scorer bug looks like."""

    def score(self, text: str) -> float:
        if "explode" in text:
            raise ValueError("cannot score this one")
        return super().score(text)


def test_a_prompt_the_scorer_raises_on_falls_back_alone_and_its_job_is_scored() -> None:
    calls: list[tuple[str, str]] = []
    scoring = LearnedScoring(on_fallback=lambda route, reason: calls.append((route, reason)))
    policy = policy_with("ngram-v1")
    scoring.load(policy)
    shipped = shipped_scorer()
    scoring.scorers = ScorerSet(
        {"ngram-v1": PickyScorer(shipped.name, shipped.spec, shipped.bias, shipped.weights)}, {}
    )
    prompts = [*texts(2), "please explode", *texts(2)]

    async def burst() -> list[Any]:
        return await asyncio.gather(
            *(
                scoring.attach(features("tiers"), request(p), policy, TenantState(), NOON)
                for p in prompts
            )
        )

    try:
        scored = asyncio.run(burst())
    finally:
        scoring.close()
    problems = [s.strong_score.problem for s in scored]
    assert problems == [None, None, "failed", None, None]
    assert [s.strong_score.score for i, s in enumerate(scored) if i != 2] == [
        shipped.score(p) for i, p in enumerate(prompts) if i != 2
    ]
    assert calls == [("tiers", "failed")]


def test_a_request_that_goes_away_while_queued_leaves_the_rest_of_its_job_scored() -> None:
    scoring = LearnedScoring()
    policy = policy_with("ngram-v1")
    scoring.load(policy)
    prompts = texts(3)

    async def burst() -> tuple[list[Any], int]:
        tasks = [
            asyncio.ensure_future(
                scoring.attach(features("tiers"), request(p), policy, TenantState(), NOON)
            )
            for p in prompts
        ]
        await asyncio.sleep(0)  # all three queued in this turn's job
        tasks[1].cancel()  # its client disconnected
        # an answer not delivered would hang the request: fail instead
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        return done, scoring._pending

    try:
        done, pending = asyncio.run(burst())
    finally:
        scoring.close()
    assert isinstance(done[1], asyncio.CancelledError)
    shipped = shipped_scorer()
    assert [done[0].strong_score.score, done[2].strong_score.score] == [
        shipped.score(prompts[0]),
        shipped.score(prompts[2]),
    ]
    assert pending == 0  # the gone request gave its place in the pool back
