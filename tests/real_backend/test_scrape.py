"""The load a llamacpp pool scrapes is what llama-server's own `/metrics` and `/slots`
say, read here with the Prometheus parser and plain JSON beside the pool's reading."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from gateway.pools import ReplicaPool
from gateway.settings.server import ReplicaPoolSettings
from tests.real_backend.conftest import Replicas
from tests.real_backend.support import (
    MODEL,
    busy_slots,
    server_metrics,
    server_slots,
    system_prompt,
    wait_for,
)
from tools.llamacpp.replicas import LlamaServer

pytestmark = pytest.mark.real_backend

SLOTS = 3
RUNNING = 2


@contextmanager
def generating(server: LlamaServer, count: int) -> Iterator[None]:
    """`count` long streams straight to the server while the block runs; cut after."""
    stop = threading.Event()

    def stream(n: int) -> None:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": system_prompt(n, 200)}],
            "max_tokens": 3000,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", server.base_url + "/chat/completions", json=body) as reply:
            for _ in reply.iter_lines():
                if stop.is_set():
                    return

    threads = [threading.Thread(target=stream, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)


def kv_use(slots: list[dict[str, object]]) -> float:
    cells = sum(int(str(slot["n_ctx"])) for slot in slots)
    held = sum(int(str(slot["n_prompt_tokens"])) for slot in slots if slot["is_processing"])
    return held / cells


async def scrape(server: LlamaServer) -> ReplicaPool:
    settings = ReplicaPoolSettings(urls=[server.base_url], metrics_style="llamacpp")
    pool = ReplicaPool("llama", settings)
    await pool.check_now()
    await pool.stop()
    return pool


def test_the_pool_reads_running_queued_kv_use_and_slots_as_the_server_reports_them(
    llama_replicas: Replicas,
) -> None:
    with llama_replicas(1, parallel=SLOTS) as (server,), generating(server, RUNNING):
        wait_for(lambda: busy_slots(server) == RUNNING, what="two requests generating")
        kv_before = kv_use(server_slots(server))
        pool = asyncio.run(scrape(server))
        kv_after = kv_use(server_slots(server))
        metrics = server_metrics(server)

    replica = pool.replicas[0]
    load = replica.scraped
    assert load.running == metrics["llamacpp:requests_processing"] == RUNNING
    assert load.queued == metrics["llamacpp:requests_deferred"] == 0
    assert load.slots == SLOTS
    # the slot count is the replica's in-flight cap (no max_inflight_per_replica set)
    assert replica.max_in_flight == SLOTS
    # the streams keep generating, so the reading lies between the two around it
    assert 0 < kv_before <= load.kv_usage <= kv_after
    cached = metrics["llamacpp:prompt_tokens_cached_total"]
    computed = metrics["llamacpp:prompt_tokens_total"]
    assert load.cache_hit_rate == pytest.approx(cached / (cached + computed))


def test_an_explicit_cap_wins_over_the_slot_count(llama_replicas: Replicas) -> None:
    with llama_replicas(1, parallel=SLOTS) as (server,):
        settings = ReplicaPoolSettings(
            urls=[server.base_url], metrics_style="llamacpp", max_inflight_per_replica=7
        )
        pool = ReplicaPool("llama", settings)

        async def check() -> None:
            await pool.check_now()
            await pool.stop()

        asyncio.run(check())
    assert pool.replicas[0].scraped.slots == SLOTS
    assert pool.replicas[0].max_in_flight == 7
