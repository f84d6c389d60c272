"""A route keeping a quality target, through a real gateway process and the official SDK:
before anything is measured it serves its reference, `x-gateway-route` says
`unmeasured`, and the quality metric counts it (it never claims a saving unmeasured)."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

KEY = "gw-test-quality-target"


def policy() -> dict[str, Any]:
    def model(upstream: str, price: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": price, "output": price},
        }

    measured = {
        "strategy": "measured",
        "models": ["small", "big"],
        "reference": "big",
        "quality_target": 0.95,
    }
    return {
        "models": {"big": model("big-up", 8), "small": model("small-up", 0.4)},
        "routes": {"kept": measured},
        "tenants": {"acme": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


def test_an_unmeasured_route_serves_its_reference_and_says_so() -> None:
    with OpenAIFake() as fake:
        config = {"providers": {"fake": openai_provider(fake.base_url)}}
        with GatewayProcess(config, policy()) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="kept", messages=[{"role": "user", "content": "hello"}], max_tokens=5
            )
            completion = raw.parse()
            metrics = httpx.get(gateway.url + "/metrics", timeout=5).text
    assert completion.choices[0].message.content
    assert raw.headers["x-gateway-model"] == "big"
    route = raw.headers["x-gateway-route"]
    assert route.startswith("kept; served=big; reason=measured-chat-unmeasured-reference"), route
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("gateway_route_quality_total{")
        and 'route="kept"' in line
        and 'status="unmeasured"' in line
    ]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) == 1.0, metrics[-2000:]
