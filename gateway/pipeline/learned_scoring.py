"""Learned-route scoring before the plan stage, off the event loop.

The scorer (a pure-Python linear model, ~0.1-0.5 ms per prompt) runs in a small,
bounded thread pool so a burst of learned-routed requests never stalls the loop. The
prompts that arrive in one event-loop turn go to the pool as one job: a hop to the
thread and back costs about as much CPU as scoring a short prompt, and every hop waits
for the loop to let go of the interpreter lock. When the pool is saturated, or the
route's weights failed to load, or scoring raises, the request is planned without a
score: the route's `fallback_strategy` orders it, the reason in `x-gateway-route` says
why (`learned-saturated+cheapest...`) and a metric counts it. A prompt that makes the
scorer raise fails alone, not the others of its job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from functools import partial

from gateway.routing.features import RequestFeatures, StrongScore
from gateway.routing.learned.scoring import (
    ScorerSet,
    learned_target,
    load_scorers,
    scoring_text,
    with_score,
)
from gateway.routing.learned.weights import Scorer
from gateway.routing.state import TenantState
from gateway.settings.policy import Policy
from gateway.settings.routes import LearnedSettings
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
        # this turn's prompts, per scorer (by identity: a reload loads new ones), waiting
        # to go to the pool as one job
        self._unsent: dict[int, _Job] = {}
        self.scorers = ScorerSet({}, {})
        # versioned scorers (`redis:ROUTE`) adopted from Redis: kept across reloads
        self._adopted: dict[str, Scorer] = {}

    def load(self, policy: Policy) -> None:
        """Load the scorers a policy's learned routes name (startup and every reload);
        a file that fails to load is logged and its routes fall back."""
        loaded = load_scorers(policy)
        self.scorers = replace(loaded, loaded={**loaded.loaded, **self._adopted})
        for name, problem in self.scorers.failed.items():
            log.error("learned routing: %s did not load, its routes fall back: %s", name, problem)

    def adopt(self, name: str, scorer: Scorer) -> None:
        """Serve `scorer` under `name` (a promoted version), from the next request on."""
        self._adopted[name] = scorer
        self.scorers = replace(self.scorers, loaded={**self.scorers.loaded, name: scorer})

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
        score = await self._score(target.settings, scoring_text(request))
        if score.problem is not None:
            self._on_fallback(target.route, score.problem)
        return with_score(features, score)

    async def _score(self, settings: LearnedSettings, text: str) -> StrongScore:
        name = settings.scorer
        scorer = self.scorers.get(name)
        if scorer is None:
            return StrongScore(name, None, "unavailable")
        if self._pending >= self._max_pending:
            return StrongScore(name, None, "saturated")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="scorer")
        self._pending += 1
        try:
            value = await self._queued(scorer, text)
        except Exception:
            log.exception("learned scorer %s failed", name)
            return StrongScore(name, None, "failed")
        finally:
            self._pending -= 1
        # a few sigmoids on the loop: cheaper than another hop to the pool
        return self.scorers.scored(settings, value)

    def _queued(self, scorer: Scorer, text: str) -> asyncio.Future[float]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[float] = loop.create_future()
        job = self._unsent.get(id(scorer))
        if job is None:
            job = self._unsent[id(scorer)] = _Job(scorer)
            if len(self._unsent) == 1:
                # call_soon runs after every callback already ready in this turn: the
                # requests woken together are scored together
                loop.call_soon(self._send)
        job.texts.append(text)
        job.answers.append(answer)
        return answer

    def _send(self) -> None:
        jobs, self._unsent = self._unsent, {}
        loop = asyncio.get_running_loop()
        for job in jobs.values():
            if self._executor is None:  # closed in this turn
                job.deliver_error(RuntimeError("the scorer pool is closed"))
                continue
            try:
                done = loop.run_in_executor(self._executor, job.score_each)
            except RuntimeError as exc:  # the pool was shut down (closing)
                job.deliver_error(exc)
                continue
            done.add_done_callback(partial(_deliver, job))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class _Job:
    """One scorer's prompts from one loop turn, scored in one trip to the pool."""

    __slots__ = ("answers", "scorer", "texts")

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.texts: list[str] = []
        self.answers: list[asyncio.Future[float]] = []

    def score_each(self) -> list[float | Exception]:
        """In the pool's thread; a prompt the scorer raises on is answered with the error."""
        results: list[float | Exception] = []
        for text in self.texts:
            try:
                results.append(self.scorer.score(text))
            except Exception as exc:
                results.append(exc)  # its own request falls back, not the whole job
        return results

    def deliver_error(self, exc: BaseException) -> None:
        for answer in self.answers:
            if not answer.done():  # a request that went away cancelled its answer
                answer.set_exception(exc)


def _deliver(job: _Job, done: asyncio.Future[list[float | Exception]]) -> None:
    if done.cancelled():
        job.deliver_error(asyncio.CancelledError())
        return
    error = done.exception()
    if error is not None:
        job.deliver_error(error)
        return
    for answer, result in zip(job.answers, done.result(), strict=True):
        if answer.done():
            continue
        if isinstance(result, Exception):
            answer.set_exception(result)
        else:
            answer.set_result(result)
