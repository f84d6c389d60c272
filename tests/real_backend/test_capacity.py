"""The per-replica cap comes from llama-server's slot count and keeps its own deferred
queue empty: the overflow waits in the gateway's fair queue, where it can still be placed
on whichever replica frees a slot first. The same load under a cap above the slot count
fills the server's deferred queue, so the check can fail."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.real_backend.conftest import Replicas
from tests.real_backend.support import LoadWatcher, client_for, messages, system_prompt
from tests.support.gateway_process import GatewayProcess
from tools.llamacpp.replicas import LlamaServer

pytestmark = pytest.mark.real_backend

SLOTS = 2
CONCURRENT = 12
# three waves of six requests per replica: the server's queue, if any, lasts seconds
REPLY_TOKENS = 300


def load_through(
    gateway: GatewayProcess, servers: list[LlamaServer]
) -> tuple[LoadWatcher, list[Any]]:
    client = client_for(gateway.base_url)

    def ask(n: int) -> Any:
        return client.chat.completions.create(
            model="tiny-llama",
            messages=messages(system_prompt(n, 40), f"Question {n}"),
            max_tokens=REPLY_TOKENS,
            extra_body={"ignore_eos": True},
        )

    with LoadWatcher(servers) as watcher, ThreadPoolExecutor(CONCURRENT) as pool:
        replies = list(pool.map(ask, range(CONCURRENT)))
    return watcher, replies


def test_the_slot_count_caps_each_replica_and_the_gateway_holds_the_overflow(
    llama_replicas: Replicas, gateway_over: Callable[..., GatewayProcess]
) -> None:
    with llama_replicas(2, parallel=SLOTS) as servers:
        urls = [server.base_url for server in servers]
        capped = gateway_over(urls, "least_load")
        watcher, replies = load_through(capped, servers)
        assert all(reply.usage.completion_tokens == REPLY_TOKENS for reply in replies)
        assert watcher.max_processing == SLOTS  # every slot was used...
        assert watcher.max_deferred == 0  # ...and nothing waited inside a server
        capped.stop()

        # a cap the servers cannot hold: the rest waits where the gateway cannot move it
        overcommitted = gateway_over(urls, "least_load", max_inflight_per_replica=CONCURRENT)
        watcher, replies = load_through(overcommitted, servers)
        assert all(reply.usage.completion_tokens == REPLY_TOKENS for reply in replies)
        assert watcher.max_deferred > 0
