"""Retries, fallback to the next candidate, and circuit breakers, through the real server."""

from __future__ import annotations

import time

import openai

from tests.api.conftest import CLIENT_KEY
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

USER = [{"role": "user", "content": "hi"}]


def test_open_breaker_diverts_to_the_fallback_and_closes_after_the_upstream_heals() -> None:
    with OpenAIFake() as primary, OpenAIFake() as backup:
        config = {
            "providers": {
                "primary": openai_provider(
                    primary.base_url,
                    retry={"max_attempts": 1},
                    breaker={"failure_threshold": 2, "open_seconds": 1.0},
                ),
                "backup": openai_provider(backup.base_url),
            }
        }
        policy = {
            "models": {
                "main": {"deployments": [{"provider": "primary", "upstream_model": "main-up"}]},
                "spare": {"deployments": [{"provider": "backup", "upstream_model": "spare-up"}]},
            },
            "routes": {"auto": {"strategy": "ordered", "models": ["main", "spare"]}},
            "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(CLIENT_KEY)}]}},
        }
        with GatewayProcess(config, policy) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
            primary.enqueue(Reply.error(503, "down"), Reply.error(503, "down"))
            for _ in range(2):
                raw = client.chat.completions.with_raw_response.create(model="auto", messages=USER)
                assert raw.headers["x-gateway-model"] == "spare"
                assert "fallback-from=main:503" in raw.headers["x-gateway-route"]
            assert len(primary.requests) == 2

            # open: the primary is skipped without being called, and the header says it
            # was set aside, not fallen back from
            raw = client.chat.completions.with_raw_response.create(model="auto", messages=USER)
            assert raw.headers["x-gateway-model"] == "spare"
            assert "skipped=main:circuit_open" in raw.headers["x-gateway-route"]
            assert "fallback-from" not in raw.headers["x-gateway-route"]
            assert len(primary.requests) == 2

            # after open_seconds probes go through (1, then 2, then 4 at once); the healed
            # primary closes the breaker after three successes
            time.sleep(1.2)
            for _ in range(3):
                raw = client.chat.completions.with_raw_response.create(model="auto", messages=USER)
                assert raw.headers["x-gateway-model"] == "main"
            assert len(primary.requests) == 5


def test_retry_after_from_the_upstream_is_honoured() -> None:
    with OpenAIFake() as upstream:
        config = {"providers": {"up": openai_provider(upstream.base_url)}}
        policy = {
            "models": {"m": {"deployments": [{"provider": "up", "upstream_model": "m"}]}},
            "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(CLIENT_KEY)}]}},
        }
        with GatewayProcess(config, policy) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
            upstream.enqueue(Reply.error(429, "slow down", headers={"retry-after": "1"}))
            started = time.monotonic()
            reply = client.chat.completions.create(model="m", messages=USER)
            assert reply.choices[0].message.content
            assert time.monotonic() - started >= 1.0
            assert len(upstream.requests) == 2
