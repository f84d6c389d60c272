"""A burst against llama-server through the default transport (`http1`) loses nothing.

Sixty streamed requests at once on two replicas of four slots: the gateway runs eight
and holds the rest in its queue, each freed slot taking the next waiter, so every
connection to a replica carries several requests in a row. Then the pool sits idle for
llama-server's keep-alive time (cpp-httplib closes an idle connection after 5 s) and a
second burst arrives while the server is closing the connections the gateway keeps:
the race between the server's idle timer and a reused connection that once lost 16 of
60 requests in `bench/batching.py --backend llamacpp --transport http1 --loads inf`.
Every request of both bursts must stream its whole reply and its usage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.real_backend.conftest import Replicas
from tests.real_backend.support import CLIENT_KEY, MODEL, messages, system_prompt
from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.real_backend

SLOTS = 4
BURST = 60
PROMPTS = 8
REPLY_TOKENS = 16
# cpp-httplib's CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND
SERVER_KEEPALIVE_SECONDS = 5.0


async def streamed_reply(client: openai.AsyncOpenAI, n: int) -> tuple[int, int]:
    """Content chunks and completion tokens of one streamed request."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=messages(system_prompt(n % PROMPTS, 150), f"Question {n}: where is it?"),
        max_tokens=REPLY_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = tokens = 0
    async for chunk in stream:
        chunks += any(choice.delta.content for choice in chunk.choices)
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return chunks, tokens


async def bursts(base_url: str, pause: float) -> list[list[Any]]:
    """Two bursts of BURST requests, the second `pause` seconds after the first ended;
    each request's (chunks, tokens) or the exception it raised."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0, timeout=120)
    results = []
    async with client:
        for wave in range(2):
            if wave:
                await asyncio.sleep(pause)
            requests = (streamed_reply(client, wave * BURST + n) for n in range(BURST))
            results.append(list(await asyncio.gather(*requests, return_exceptions=True)))
    return results


@pytest.mark.parametrize("balancer", ["round_robin", "prefix_affinity"])
def test_two_bursts_over_the_keep_alive_race_lose_no_request(
    llama_replicas: Replicas, gateway_over: Callable[..., GatewayProcess], balancer: str
) -> None:
    with llama_replicas(2, parallel=SLOTS) as servers:
        gateway = gateway_over([server.base_url for server in servers], balancer)
        started = time.monotonic()
        results = asyncio.run(bursts(gateway.base_url, SERVER_KEEPALIVE_SECONDS))
        elapsed = time.monotonic() - started
    for wave, outcomes in enumerate(results):
        failures = [repr(outcome) for outcome in outcomes if isinstance(outcome, BaseException)]
        assert not failures, (wave, len(failures), failures[:3], elapsed)
        assert all(tokens == REPLY_TOKENS and chunks > 0 for chunks, tokens in outcomes), (
            wave,
            outcomes,
        )
