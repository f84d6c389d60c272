"""Replicas follow promoted scorer versions: routes with `learned.scorer: redis:ROUTE`
serve the version `gateway route retrain` (or `rollback`) made current in Redis. Every
`interval_seconds` each replica reads the current version number (one GET a route) and,
when it changed, fetches and decodes the weights off the request path and swaps them in;
requests keep their scorer until the swap. Until a first version is adopted, or while
Redis cannot be read, the route falls back (no score) or keeps the version it has."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from gateway.pipeline.learned_scoring import LearnedScoring
from gateway.routing.learned.weights import WeightsError, decode, versioned_route
from gateway.settings.policy import Policy
from gateway.state.scorer_versions import ScorerVersions

log = logging.getLogger("gateway.scoring")

DEFAULT_INTERVAL_SECONDS = 2.0


def versioned_scorers(policy: Policy) -> dict[str, str]:
    """`redis:ROUTE` scorer names a policy's routes use -> ROUTE."""
    out: dict[str, str] = {}
    for route in policy.routes.values():
        if route.learned is not None:
            versioned = versioned_route(route.learned.scorer)
            if versioned is not None:
                out[route.learned.scorer] = versioned
    return out


class ScorerVersionWatch:
    def __init__(
        self,
        client: Any,
        key_prefix: str,
        scoring: LearnedScoring,
        policy: Callable[[], Policy],
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        self._client = client
        self._prefix = key_prefix
        self._scoring = scoring
        self._policy = policy
        self._interval = interval_seconds
        self._serving: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        task = asyncio.current_task()
        while True:
            await self.refresh()
            if task is not None and task.cancelling():
                # cancelled mid-call and the Redis client swallowed it (redis/redis-py#2028)
                raise asyncio.CancelledError
            await asyncio.sleep(self._interval)

    async def refresh(self) -> None:
        for name, route in versioned_scorers(self._policy()).items():
            try:
                await self._follow(name, route)
            except (OSError, WeightsError, ValueError) as exc:
                log.warning("scorer %s: keeping version %s: %s", name, self._serving.get(name), exc)
            except Exception as exc:  # a Redis error: keep serving what we have
                log.warning(
                    "scorer %s: Redis unavailable, keeping version %s: %s",
                    name,
                    self._serving.get(name),
                    type(exc).__name__,
                )

    async def _follow(self, name: str, route: str) -> None:
        store = ScorerVersions(self._client, route, self._prefix)
        version = await store.current()
        if version is None or version == self._serving.get(name):
            return
        data = await store.weights(version)
        if data is None:
            raise WeightsError(f"version {version} is current but its weights are gone")
        scorer = decode(data, f"{name}@v{version}")
        self._scoring.adopt(name, scorer)
        self._serving[name] = version
        log.info("scorer %s: serving version %d", name, version)
