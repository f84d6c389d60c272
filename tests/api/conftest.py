from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

CLIENT_KEY = "gw-test-key-alpha"
LIMITED_KEY = "gw-test-key-limited"


def policy_for(upstream: str = "fake") -> dict[str, Any]:
    return {
        "models": {
            "fast-model": {
                "aliases": ["fast"],
                "deployments": [{"provider": upstream, "upstream_model": "upstream-fast"}],
                "prices": {"input": 1.0, "output": 2.0},
            },
            "other-model": {
                "deployments": [{"provider": upstream, "upstream_model": "upstream-other"}],
                "prices": {"input": 3.0, "output": 6.0},
            },
        },
        "tenants": {
            "acme": {
                "keys": [
                    {"id": "alpha", "hash": key_hash(CLIENT_KEY)},
                    {"id": "limited", "hash": key_hash(LIMITED_KEY), "models": ["other-model"]},
                ]
            }
        },
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(dialect="compatible") as server:
        yield server


# every HTTP client under the transport seam serves the same contract
@pytest.fixture(scope="module", params=["http1", "aiohttp", "httpx"])
def gateway(fake: OpenAIFake, request: pytest.FixtureRequest) -> Iterator[GatewayProcess]:
    transport = request.param
    config = {
        "server": {"max_body_bytes": 1024 * 1024, "shutdown_grace_seconds": 5},
        "providers": {
            # a breaker that never opens here: these tests script failures on purpose
            "fake": openai_provider(
                fake.base_url,
                timeouts={"read": 3},
                breaker={"failure_threshold": 1000, "min_requests": 1000},
                transport=transport,
            ),
            # the same fake with a short read timeout: test_upstream_timeout_is_504 waits
            # it out on each of three attempts (a short timeout on "fake" itself made a
            # stream of a loaded machine fail)
            "fake-impatient": openai_provider(
                fake.base_url,
                timeouts={"read": 1},
                breaker={"failure_threshold": 1000, "min_requests": 1000},
                transport=transport,
            ),
            "down": openai_provider(
                "http://127.0.0.1:9/v1", retry={"max_attempts": 1}, transport=transport
            ),
        },
    }
    policy = policy_for()
    policy["models"]["impatient-model"] = {
        "deployments": [{"provider": "fake-impatient", "upstream_model": "upstream-fast"}]
    }
    with GatewayProcess(config, policy) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess, fake: OpenAIFake) -> openai.OpenAI:
    fake.requests.clear()
    return openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
