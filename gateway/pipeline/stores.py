"""The shared state a gateway process talks to: the limit store, the spend ledger and the
response cache, Redis-backed or in-memory per `store.kind`, built once at start."""

from __future__ import annotations

import hashlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from gateway.cache.answer_store import AnswerCacheStore, MemoryAnswerCache, RedisAnswerCache
from gateway.limits import GuardedLimitStore, MemoryLimitStore, RedisLimitStore
from gateway.limits.limit_store import LimitStore
from gateway.limits.redis_limit_store import detect_cluster, redis_client
from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger import Ledger, LedgerRetention, LedgerWriter
from gateway.metering.memory_ledger import MemoryLedger
from gateway.settings.response_cache import ResponseCacheStoreSettings
from gateway.settings.server import StoreSettings

log = logging.getLogger("gateway.store")


@dataclass
class Stores:
    limits: LimitStore
    ledger: LedgerWriter
    answers: AnswerCacheStore
    guard: GuardedLimitStore | None = None
    redis: aioredis.Redis | aioredis.RedisCluster | None = None
    memory_ledger: MemoryLedger | None = None

    @property
    def state(self) -> str:
        return self.guard.state if self.guard is not None else "ok"

    async def close(self, grace_seconds: float) -> None:
        if isinstance(self.ledger, Ledger):
            await self.ledger.close(grace_seconds=grace_seconds)
        await self.limits.close()
        await self.answers.close()
        if self.redis is not None:
            await self.redis.aclose()


def spill_dir(settings: StoreSettings) -> Path:
    """Where the ledger's journal and spill files live: `store.spill_dir`, or else a
    directory under the system's temporary directory named for the ledger they belong to
    (Redis address, database and key prefix, never the password), so that gateways on one
    host writing to different ledgers never replay each other's records."""
    if settings.spill_dir:
        return Path(settings.spill_dir)
    assert settings.redis_url is not None
    parts = urlsplit(settings.redis_url.get_secret_value())
    where = f"{parts.scheme}://{parts.hostname}:{parts.port}{parts.path}|{settings.key_prefix}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "gateway-ledger" / digest


async def open_stores(
    settings: StoreSettings, cache: ResponseCacheStoreSettings | None = None
) -> Stores:
    cache = cache or ResponseCacheStoreSettings()
    if settings.kind == "memory":
        ledger = MemoryLedger(settings.memory_ledger_records)
        return Stores(
            limits=MemoryLimitStore(),
            ledger=ledger,
            answers=MemoryAnswerCache(cache.memory_max_bytes),
            memory_ledger=ledger,
        )
    assert settings.redis_url is not None, "validated: redis store needs redis_url"
    url = settings.redis_url.get_secret_value()
    timeout = settings.timeout_ms / 1000
    # store.cluster unset means "ask the server": a plain client on a cluster gets MOVED
    # for every key outside the seed node's slots
    cluster = settings.cluster
    if cluster is None:
        cluster = await detect_cluster(url, timeout_seconds=timeout)
    client = redis_client(url, timeout_seconds=timeout, cluster=cluster)
    store = RedisLimitStore(client, timeout_seconds=timeout, cluster=cluster)
    try:
        await store.load_scripts()
    except Exception as exc:
        # the gateway starts anyway: the guard serves per `on_failure` until Redis answers
        log.warning(
            "Redis is not reachable at start (%s); serving per store.on_failure", type(exc).__name__
        )
    guard = GuardedLimitStore(
        store,
        mode=settings.on_failure,
        timeout_seconds=timeout,
        probe_interval_seconds=settings.probe_interval_seconds,
    )
    # the ledger batches off the hot path, so it can afford a longer timeout than admission
    ledger_timeout = max(1.0, timeout * 20)
    ledger_redis: aioredis.Redis | aioredis.RedisCluster = (
        # follows the {ledger} slot's master through a failover
        aioredis.RedisCluster.from_url(url, socket_timeout=ledger_timeout)
        if cluster
        else aioredis.from_url(url, socket_timeout=ledger_timeout)
    )
    ledger_writer = Ledger(
        ledger_redis,
        keys=LedgerKeys(settings.key_prefix),
        spill_dir=spill_dir(settings),
        queue_size=settings.ledger_queue_size,
        retention=LedgerRetention(
            stream_seconds=settings.ledger_stream_retention_seconds,
            stream_max_records=settings.ledger_stream_max_records,
        ),
    )
    await ledger_writer.start()
    # its own connections (made on first use: nothing when no route caches), so cache
    # reads never queue behind admissions
    cache_timeout = cache.timeout_ms / 1000
    answers = RedisAnswerCache(
        redis_client(url, timeout_seconds=cache_timeout, cluster=cluster, max_connections=64),
        timeout_seconds=cache_timeout,
        retry_after_seconds=settings.probe_interval_seconds,
    )
    return Stores(
        limits=guard, ledger=ledger_writer, answers=answers, guard=guard, redis=ledger_redis
    )
