"""Which breaker board a process runs: local, plus Redis-shared for the providers that
set `breaker.shared: true` when the store is Redis (built when the process starts)."""

from __future__ import annotations

import logging

from gateway.limits.redis_limit_store import redis_client
from gateway.resilience.boards import BreakerBoards, SharedOpener
from gateway.resilience.breaker import BreakerBoard, TransitionHook
from gateway.resilience.shared_breaker import SharedBreakerBoard
from gateway.settings.server import ServerConfig

log = logging.getLogger("gateway.breakers")


def breaker_boards(config: ServerConfig, on_transition: TransitionHook) -> BreakerBoards:
    return BreakerBoards(
        BreakerBoard(on_transition=on_transition), _shared_opener(config, on_transition)
    )


def _shared_opener(config: ServerConfig, on_transition: TransitionHook) -> SharedOpener | None:
    shared = [p.breaker for p in config.providers.values() if p.breaker.shared]
    if not shared:
        return None
    store = config.store
    if store.kind != "redis" or store.redis_url is None:
        log.warning("breaker.shared needs store.kind redis; these breakers stay local")
        return None
    url = store.redis_url.get_secret_value()
    timeout = store.timeout_ms / 1000

    async def open_shared() -> SharedBreakerBoard:
        return SharedBreakerBoard(
            redis_client(url, timeout_seconds=timeout, cluster=bool(store.cluster)),
            key_prefix=store.key_prefix,
            refresh_interval=min(b.sync_seconds for b in shared),
            timeout=timeout,
            redis_retry_interval=store.probe_interval_seconds,
            on_transition=on_transition,
            owns_client=True,
        )

    return open_shared
