"""A llama-server replica killed (SIGKILL) while it serves: the gateway avoids it, its
in-flight non-streaming requests are sent again to the survivor, and its streams end
with an OpenAI error event rather than a silent cut."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from tests.real_backend.conftest import Replicas
from tests.real_backend.support import (
    MODEL,
    busy_slots,
    client_for,
    messages,
    server_metrics,
    system_prompt,
    wait_for,
)
from tests.support.gateway_process import GatewayProcess
from tools.llamacpp.replicas import LlamaServer

pytestmark = pytest.mark.real_backend

CONCURRENT = 6
# long enough that every request is still generating when the replica dies
LONG_REPLY = {"max_tokens": 800, "extra_body": {"ignore_eos": True}}


def all_running(survivor: LlamaServer, victim: LlamaServer) -> bool:
    """Every request is generating, some of them on the victim."""
    on_victim = busy_slots(victim)
    return on_victim > 0 and on_victim + busy_slots(survivor) == CONCURRENT


def test_non_streaming_requests_on_a_killed_replica_fail_over_to_the_survivor(
    llama_replicas: Replicas, gateway_over: Callable[..., GatewayProcess]
) -> None:
    with llama_replicas(2, parallel=4) as (survivor, victim):
        gateway = gateway_over([survivor.base_url, victim.base_url], "round_robin")
        client = client_for(gateway.base_url)

        def ask(n: int) -> Any:
            return client.chat.completions.create(
                model=MODEL, messages=messages(system_prompt(n, 50), f"Question {n}"), **LONG_REPLY
            )

        with ThreadPoolExecutor(CONCURRENT) as pool:
            replies = [pool.submit(ask, n) for n in range(CONCURRENT)]
            wait_for(lambda: all_running(survivor, victim), what="every request running")
            predicted_before = server_metrics(survivor)["llamacpp:tokens_predicted_total"]
            victim.kill()
            completions = [reply.result(timeout=60) for reply in replies]

        # every request was answered in full, the victim's ones by the survivor
        assert all(c.usage is not None and c.usage.completion_tokens == 800 for c in completions)
        # later requests avoid the dead replica: every one is served
        for n in range(4):
            reply = client.chat.completions.create(
                model=MODEL, messages=messages(system_prompt(n, 50), "again"), max_tokens=8
            )
            assert reply.choices[0].message.content is not None
        predicted = server_metrics(survivor)["llamacpp:tokens_predicted_total"] - predicted_before
        # the survivor generated the victim's requests again (each at least in part) and the
        # four later ones
        assert predicted > 800 * 2


def test_streams_on_a_killed_replica_end_with_an_error_event(
    llama_replicas: Replicas, gateway_over: Callable[..., GatewayProcess]
) -> None:
    with llama_replicas(2, parallel=4) as (survivor, victim):
        gateway = gateway_over([survivor.base_url, victim.base_url], "round_robin")
        client = client_for(gateway.base_url)

        def stream(n: int) -> str:
            chunks = client.chat.completions.create(
                model=MODEL,
                messages=messages(system_prompt(n, 50), f"Question {n}"),
                stream=True,
                stream_options={"include_usage": True},
                **LONG_REPLY,
            )
            try:
                for chunk in chunks:
                    if chunk.usage is not None:
                        return "completed"
            except openai.APIConnectionError:
                return "cut"  # the connection dropped with no error event
            except openai.APIError as error:
                return f"error event: {error.message}"
            return "ended without usage"

        with ThreadPoolExecutor(CONCURRENT) as pool:
            outcomes = [pool.submit(stream, n) for n in range(CONCURRENT)]
            wait_for(lambda: all_running(survivor, victim), what="every stream running")
            on_victim = busy_slots(victim)
            victim.kill()
            ends = [outcome.result(timeout=60) for outcome in outcomes]

    errors = [end for end in ends if end.startswith("error event")]
    assert len(errors) == on_victim, ends
    assert ends.count("completed") == CONCURRENT - on_victim, ends
