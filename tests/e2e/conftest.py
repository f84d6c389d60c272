"""Session fixtures of the end-to-end tests: one fake upstream, and three gateway
processes on one Redis with the limits and budgets the tests exercise.

The shared gateways are configured `fail_closed` with a generous Redis timeout: the
tests here prove enforcement, and on a loaded 2-core test machine a short timeout would
let a burst through unchecked (fail_open) before Redis ever said no. Short timeouts and
both failure modes are proven apart, in test_redis_faults_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.support import model, server_config, start_all, stop_all, store_config, tenant
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

REPLICAS = 3

BURST_KEY = "sk-e2e-burst"
TOKENS_KEY = "sk-e2e-tokens"
ANSWERS_KEY = "sk-e2e-answers"
GIANT_KEY = "sk-e2e-giant"
STREAMS_KEY = "sk-e2e-streams"
BUDGET_KEY = "sk-e2e-budget"
METERED_KEY = "sk-e2e-metered"

REQUESTS_PER_MINUTE = 100
TOKENS_PER_MINUTE = 3000
MAX_CONCURRENT = 10
BUDGET_USD = 1


def shared_policy() -> dict[str, Any]:
    return {
        "models": {
            "chat-model": model("upstream-chat", 1, 2),
            # $1,000 / $10,000 per million tokens: a short request costs a few cents
            "priced-model": model("upstream-priced", 1000, 10000),
        },
        "tenants": {
            "burst": tenant(
                "burst", BURST_KEY, limits={"requests_per_minute": REQUESTS_PER_MINUTE}
            ),
            "tokens": tenant("tokens", TOKENS_KEY, limits={"tokens_per_minute": TOKENS_PER_MINUTE}),
            "answers": tenant(
                "answers", ANSWERS_KEY, limits={"requests_per_minute": 3, "tokens_per_minute": 1000}
            ),
            "giant": tenant("giant", GIANT_KEY, limits={"tokens_per_minute": 1000}),
            "streams": tenant("streams", STREAMS_KEY, limits={"max_concurrent": MAX_CONCURRENT}),
            "budget": tenant("budget", BUDGET_KEY, budgets=[{"usd": BUDGET_USD, "period": "day"}]),
            "metered": tenant("metered", METERED_KEY),
        },
    }


@pytest.fixture(scope="session")
def upstream() -> Iterator[OpenAIFake]:
    with OpenAIFake() as fake:
        yield fake


@pytest.fixture(scope="session")
def shared_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def replicas(upstream: OpenAIFake, shared_redis: RedisServer) -> Iterator[list[GatewayProcess]]:
    store = store_config(shared_redis.url, timeout_ms=10_000, on_failure="fail_closed")
    config = server_config(upstream.base_url, store)
    gateways = start_all(GatewayProcess(config, shared_policy()) for _ in range(REPLICAS))
    yield gateways
    stop_all(gateways)
