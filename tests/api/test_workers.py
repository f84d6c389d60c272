"""Several workers behind one port: one /metrics exposition adds up all of them."""

from __future__ import annotations

import time

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.multiprocess_values import FLUSH_SECONDS
from tests.api.conftest import CLIENT_KEY, policy_for
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, openai_provider
from tests.support.redis_server import RedisServer


def requests_served(text: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_requests_total" and sample.labels.get("code") == "200"
    )


def test_counters_from_two_workers_add_up(redis_server: RedisServer) -> None:
    with OpenAIFake() as fake:
        config = {
            "store": {"kind": "redis", "redis_url": redis_server.url, "key_prefix": "workers"},
            "providers": {"fake": openai_provider(fake.base_url)},
        }
        with GatewayProcess(config, policy_for(), workers=2) as gateway:
            served_by: set[str] = set()
            for i in range(40):
                # a new connection each time, so the kernel spreads them over the workers
                with httpx.Client() as http:
                    client = openai.OpenAI(
                        base_url=gateway.base_url, api_key=CLIENT_KEY, http_client=http
                    )
                    raw = client.chat.completions.with_raw_response.create(
                        model="fast-model", messages=[{"role": "user", "content": f"n{i}"}]
                    )
                    served_by.add(raw.headers["x-request-id"][:20])
            assert len(served_by) == 2, "both workers served requests"
            # the worker not scraped writes its values every FLUSH_SECONDS
            deadline = time.monotonic() + 10 * FLUSH_SECONDS
            while (served := requests_served(httpx.get(gateway.url + "/metrics").text)) < 40:
                assert time.monotonic() < deadline, f"{served} of 40 requests counted"
                time.sleep(FLUSH_SECONDS / 5)
            assert served == 40


def test_memory_store_refuses_several_workers() -> None:
    process = GatewayProcess(
        {"providers": {"fake": openai_provider("http://127.0.0.1:9/v1")}},
        policy_for(),
        workers=2,
    )
    try:
        process.start()
        raise AssertionError("a memory store with 2 workers must not start")
    except RuntimeError as exc:
        assert "several workers need a shared store" in str(exc)
    finally:
        process.stop()
