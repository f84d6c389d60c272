"""Learned-route scoring before the plan stage, off the event loop.

The scorer (a pure-Python linear model, ~0.1-0.5 ms per prompt) runs in a small,
bounded thread pool so a burst of learned-routed requests never stalls the loop. When
the pool is saturated, or the route's weights failed to load, or scoring raises, the
request is planned without a score: the route's `fallback_strategy` orders it, the
reason in `x-gateway-route` says why (`learned-saturated+cheapest...`) and a metric
counts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from gateway.routing.features import RequestFeatures, StrongScore
from gateway.routing.learned.scoring import (
    ScorerSet,
    learned_target,
    load_scorers,
    scoring_text,
    with_score,
)
from gateway.routing.state import TenantState
from gateway.settings.policy import Policy
from gateway.wire.openai import ChatRequest

log = logging.getLogger("gateway.scoring")

# one thread: the scorer holds the GIL, so more threads would not score faster; what
# the pool buys is that the event loop's own work interleaves with scoring
DEFAULT_WORKERS = 1
# requests waiting for or in scoring before new ones fall back (~64 x 0.5 ms = 32 ms)
DEFAULT_MAX_PENDING = 64


class LearnedScoring:
    def __init__(
        self,
        *,
        workers: int = DEFAULT_WORKERS,
        max_pending: int = DEFAULT_MAX_PENDING,
        on_fallback: Callable[[str, str], None] = lambda route, reason: None,
    ) -> None:
        self._workers = workers
        self._max_pending = max_pending
        self._on_fallback = on_fallback
        self._executor: ThreadPoolExecutor | None = None
        self._pending = 0
        self.scorers = ScorerSet({}, {})

    def load(self, policy: Policy) -> None:
        """Load the scorers a policy's learned routes name (startup and every reload);
        a file that fails to load is logged and its routes fall back."""
        self.scorers = load_scorers(policy)
        for name, problem in self.scorers.failed.items():
            log.error("learned scorer %s unavailable, its routes fall back: %s", name, problem)

    async def attach(
        self,
        features: RequestFeatures,
        request: ChatRequest,
        policy: Policy,
        tenant_state: TenantState,
        now: datetime,
    ) -> RequestFeatures:
        """The features with a score when the request lands on a learned route."""
        target = learned_target(features, policy, tenant_state, now)
        if target is None:
            return features
        name = target.settings.scorer
        score = await self._score(name, scoring_text(request))
        if score.problem is not None:
            self._on_fallback(target.route, score.problem)
        return with_score(features, score)

    async def _score(self, name: str, text: str) -> StrongScore:
        scorer = self.scorers.get(name)
        if scorer is None:
            return StrongScore(name, None, "unavailable")
        if self._pending >= self._max_pending:
            return StrongScore(name, None, "saturated")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="scorer")
        self._pending += 1
        try:
            value = await asyncio.get_running_loop().run_in_executor(
                self._executor, scorer.score, text
            )
        except Exception:
            log.exception("learned scorer %s failed", name)
            return StrongScore(name, None, "failed")
        finally:
            self._pending -= 1
        return StrongScore(name, value)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
