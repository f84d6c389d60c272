"""Every dashboard panel returns data, and every alert rule parses, against a real
Prometheus scraping a real gateway that served real traffic: plain requests, a stream,
a retry, a fallback, an open circuit, a 429, a policy reload, a GPU pool, the response
cache and online evaluation (the emulator judges: it ends a judge prompt's answer with a
verdict)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.emulator.emulator_process import running_emulator
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.observability.prometheus_server import (
    SCRAPE_INTERVAL,
    PrometheusServer,
    binary,
    problems_seen_by,
)
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer, free_port

KEY = "gw-dashboard-key"
USER = [{"role": "user", "content": "hello dashboard"}]


def wait_for_labels(url: str) -> None:
    """The evaluation runs off the clients' time: wait until its label and its drop are
    counted and the measured quality has been refreshed into the gauges."""
    wanted = (
        "gateway_evaluation_labels_total{",
        "gateway_evaluation_dropped_total{",
        "gateway_evaluation_quality_ratio{",
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metrics = httpx.get(url + "/metrics", timeout=5).text
        if all(name in metrics for name in wanted):
            return
        time.sleep(0.2)
    raise AssertionError(f"no evaluation label, drop and quality within 30 s:\n{metrics[-3000:]}")


def wait_for_reload(url: str) -> None:
    """Until the gateway has reloaded the touched policy (it looks once a second)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        succeeded = [
            float(line.rsplit(" ", 1)[1])
            for line in httpx.get(url + "/metrics", timeout=5).text.splitlines()
            if line.startswith('gateway_policy_reloads_total{result="success"}')
        ]
        if succeeded and succeeded[0] >= 1:
            return
        time.sleep(0.1)
    raise AssertionError("the touched policy was not reloaded within 30 s")


def test_every_panel_returns_data_for_a_live_gateway(redis_server: RedisServer) -> None:
    if binary("prometheus") is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus): test skipped")
    port = free_port()
    with (
        # Prometheus first: it scrapes nothing for five seconds after its start, which
        # pass while the upstreams and the gateway start
        PrometheusServer([f"http://127.0.0.1:{port}/metrics"], SCRAPE_INTERVAL) as prometheus,
        OpenAIFake() as primary,
        OpenAIFake() as backup,
        running_emulator("--time-scale", "0.05", "--model", "gpu-model") as gpu_a,
        running_emulator("--time-scale", "0.05", "--model", "gpu-model") as gpu_b,
    ):
        config = {
            "store": {"kind": "redis", "redis_url": redis_server.url, "key_prefix": "dash"},
            # measured quality reaches the gauges within a second of a label
            "evaluation": {"refresh_seconds": 1},
            "providers": {
                "primary": openai_provider(
                    primary.base_url,
                    retry={"max_attempts": 2, "base_delay_seconds": 0.01},
                    breaker={"failure_threshold": 2, "open_seconds": 60},
                ),
                "backup": openai_provider(backup.base_url),
                "gpu": {
                    "kind": "openai",
                    "replicas": {
                        "urls": [gpu_a.base_url + "/v1", gpu_b.base_url + "/v1"],
                        "scrape_interval_seconds": 0.5,
                    },
                },
            },
        }
        policy = {
            "models": {
                "main": {
                    "deployments": [{"provider": "primary", "upstream_model": "main"}],
                    "prices": {"input": 1, "output": 2},
                },
                "spare": {
                    "deployments": [{"provider": "backup", "upstream_model": "spare"}],
                    "prices": {"input": 1, "output": 2},
                },
                "gpu-model": {
                    "deployments": [{"provider": "gpu", "upstream_model": "gpu-model"}],
                    "prices": {"input": 0.1, "output": 0.2},
                },
            },
            "routes": {
                "auto": {"strategy": "ordered", "models": ["main", "spare"]},
                "cached": {"strategy": "ordered", "models": ["spare"], "cache": {}},
                "judged": {
                    "strategy": "ordered",
                    "models": ["spare"],
                    "evaluation": {
                        "sample_rate": 1.0,
                        "reference": "gpu-model",
                        "judge": "gpu-model",
                        "daily_usd": 10,
                    },
                },
            },
            "tenants": {
                "acme": {
                    "evaluation": {},
                    "budgets": [{"usd": 1000, "period": "month"}],
                    "keys": [
                        {
                            "id": "dash",
                            "hash": key_hash(KEY),
                            "limits": {"requests_per_minute": 30},
                        }
                    ],
                }
            },
        }
        with GatewayProcess(config, policy, port=port) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)

            def send_traffic() -> None:
                for _ in range(3):
                    client.chat.completions.create(model="spare", messages=USER)
                    client.chat.completions.create(model="gpu-model", messages=USER, max_tokens=8)
                # judged against the reference: the online evaluation row; the same request
                # id twice is labelled once, and the repeat is a counted drop
                for _ in range(2):
                    client.chat.completions.create(
                        model="judged", messages=USER, extra_headers={"x-request-id": "judged-1"}
                    )
                wait_for_labels(gateway.url)
                # a miss, then hits: the response cache's panels
                for _ in range(3):
                    client.chat.completions.create(model="cached", messages=USER)
                for chunk in client.chat.completions.create(
                    model="gpu-model", messages=USER, stream=True, max_tokens=8
                ):
                    assert chunk.id
                # fails, is retried, fails again: a retry, a fallback, then an open circuit
                primary.enqueue(*[Reply.error(503, "overloaded")] * 4)
                for _ in range(3):
                    served = client.chat.completions.with_raw_response.create(
                        model="auto", messages=USER
                    )
                    assert served.headers["x-gateway-model"] == "spare"
                with pytest.raises(openai.RateLimitError):
                    for _ in range(40):
                        client.chat.completions.create(model="spare", messages=USER)
                policy_file = Path(gateway.dir) / "policy.yaml"
                policy_file.write_text(policy_file.read_text() + "\n# touched\n")
                wait_for_reload(gateway.url)

            problems = problems_seen_by(prometheus, send_traffic)
            assert httpx.get(gateway.url + "/readyz").status_code == 200
    assert problems == [], "\n".join(problems)
