"""A GPU pool behind the gateway: emulated SGLang replicas, prefix-affine placement,
a dead replica avoided, and the pool's load on /metrics."""

from __future__ import annotations

import time

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import CLIENT_KEY
from tests.emulator.emulator_process import running_emulator
from tests.support.gateway_process import GatewayProcess, key_hash

SYSTEM = "You are the support assistant of a bicycle shop. " * 60


def pool_gateway(urls: list[str]) -> GatewayProcess:
    config = {
        "providers": {
            "gpu": {
                "kind": "openai",
                "timeouts": {"connect": 1, "read": 30},
                "retry": {"max_attempts": 2, "base_delay_seconds": 0.01},
                "replicas": {
                    "urls": urls,
                    "balancer": "prefix_affinity",
                    "gpu_class": "h100",
                    "scrape_interval_seconds": 0.3,
                },
            }
        }
    }
    policy = {
        "models": {"llama": {"deployments": [{"provider": "gpu", "upstream_model": "llama"}]}},
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(CLIENT_KEY)}]}},
    }
    return GatewayProcess(config, policy)


def ask(client: openai.OpenAI, user: str) -> int:
    reply = client.chat.completions.create(
        model="llama",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        max_tokens=4,
    )
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.cached_tokens or 0


def backend_in_flight_series(gateway: GatewayProcess) -> set[str]:
    text = httpx.get(gateway.url + "/metrics").text
    return {
        sample.labels["replica"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_backend_in_flight_requests"
    }


def test_shared_prefix_lands_on_the_replica_that_cached_it() -> None:
    flags = ("--time-scale", "0.02", "--model", "llama", "--kv-cache-tokens", "200000")
    with running_emulator(*flags) as a, running_emulator(*flags) as b:
        urls = [a.base_url + "/v1", b.base_url + "/v1"]
        with pool_gateway(urls) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
            assert ask(client, "first question") == 0
            # every later user of the same system prompt is sent where it is cached
            cached = [ask(client, f"question {i}") for i in range(6)]
            assert all(c > 500 for c in cached), cached
            deadline = time.monotonic() + 5
            while backend_in_flight_series(gateway) != set(urls):
                assert time.monotonic() < deadline, "backend metrics never appeared"
                time.sleep(0.2)


def test_a_dead_replica_is_avoided() -> None:
    flags = ("--time-scale", "0.02", "--model", "llama")
    with (
        running_emulator(*flags) as a,
        running_emulator(*flags) as b,
        pool_gateway([a.base_url + "/v1", b.base_url + "/v1"]) as gateway,
    ):
        client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
        b.stop()
        # whichever replica a prompt prefers, every request is served
        for i in range(8):
            reply = client.chat.completions.create(
                model="llama",
                messages=[{"role": "user", "content": f"distinct prompt number {i} " * 20}],
                max_tokens=4,
            )
            assert reply.choices[0].message.content is not None
