"""Requests that share a long system prompt land on the llama-server replica that holds it.

Two replicas of four slots, four system prompts, each asked four times in a seeded
shuffled order, one request at a time. A slot keeps the last prompt it ran in its KV
cache and llama-server gives a new request the slot whose cache shares the longest
prefix with it, so a replica can reuse up to four prompts at once. Under
`prefix_affinity` each prompt has one home: it misses once, on its first request, and
every later request reuses the whole system prompt. Under `round_robin` a prompt visits
both replicas and misses once on each. The server's own counter of reused tokens
(`llamacpp:prompt_tokens_cached_total`) must equal what the gateway reported to the
client in `usage.prompt_tokens_details.cached_tokens`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from tests.real_backend.conftest import Replicas
from tests.real_backend.support import client_for, messages, server_metrics, system_prompt
from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.real_backend

PROMPTS = 4
ASKS_PER_PROMPT = 4


def replay(
    llama_replicas: Replicas, gateway_over: Callable[..., GatewayProcess], balancer: str
) -> tuple[list[tuple[int, int, int]], float]:
    """(prompt, prompt tokens, cached tokens) per request, and the servers' reused-token
    total from their /metrics."""
    order = [n for n in range(PROMPTS) for _ in range(ASKS_PER_PROMPT)]
    random.Random(21).shuffle(order)
    prompts = [system_prompt(n) for n in range(PROMPTS)]
    with llama_replicas(2, parallel=4) as servers:
        gateway = gateway_over([server.base_url for server in servers], balancer)
        client = client_for(gateway.base_url)
        seen = []
        for turn, n in enumerate(order):
            reply = client.chat.completions.create(
                model="tiny-llama",
                messages=messages(prompts[n], f"Question {turn}: where is my parcel?"),
                max_tokens=4,
            )
            assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
            cached = reply.usage.prompt_tokens_details.cached_tokens or 0
            seen.append((n, reply.usage.prompt_tokens, cached))
        reused = sum(server_metrics(s)["llamacpp:prompt_tokens_cached_total"] for s in servers)
    return seen, reused


def misses(seen: list[tuple[int, int, int]]) -> int:
    """Requests that reused less than half their prompt: a cold system prompt."""
    return sum(cached < prompt / 2 for _, prompt, cached in seen)


def test_a_shared_system_prompt_is_reused_on_the_replica_that_holds_it(
    llama_replicas: Replicas, gateway_over: Callable[..., GatewayProcess]
) -> None:
    affinity, affinity_reused = replay(llama_replicas, gateway_over, "prefix_affinity")
    rotation, rotation_reused = replay(llama_replicas, gateway_over, "round_robin")

    # each prompt is cold once, then every later request reuses its system prompt
    assert misses(affinity) == PROMPTS, affinity
    first_seen: set[int] = set()
    for n, prompt, cached in affinity:
        if n in first_seen:
            assert cached > 0.8 * prompt, (n, prompt, cached)
        first_seen.add(n)
    # round robin pays a cold start on every replica a prompt visits
    assert misses(rotation) > PROMPTS, rotation
    affinity_hits = sum(cached for _, _, cached in affinity)
    rotation_hits = sum(cached for _, _, cached in rotation)
    assert affinity_hits > rotation_hits
    # the gateway reports the server's own count of reused prompt tokens
    assert affinity_hits == affinity_reused
    assert rotation_hits == rotation_reused
