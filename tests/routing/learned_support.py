"""The shipped policies and scorer, for the learned-routing tests."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from gateway.routing.learned.weights import LinearScorer, load_scorer
from gateway.settings.loader import load_policy
from gateway.settings.policy import Policy

REPO = Path(__file__).resolve().parents[2]
POLICIES = tuple(REPO / "policies" / name for name in ("models.yaml", "routes.yaml"))

# two ordinary prompts with different scores (tests compare them with thresholds they
# compute, never with a hard-coded score)
EASY = "Hi! What is the capital of France?"
HARD = (
    "Let f(x) be a polynomial of degree 4 with integer coefficients such that f(1)=2, "
    "f(2)=5 and f(3)=10. Compute the remainder when f(10) is divided by 7, and prove "
    "that your answer is unique. Show every step of the derivation."
)


@lru_cache(maxsize=1)
def shipped_policy() -> Policy:
    problems: list[str] = []
    policy = load_policy(POLICIES, os.environ, problems)
    assert policy is not None, problems
    return policy


@lru_cache(maxsize=1)
def shipped_scorer() -> LinearScorer:
    return load_scorer("ngram-v1")
