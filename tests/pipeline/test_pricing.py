"""A self-hosted deployment's GPU-hour is spread over what its GPU class serves: the same
request costs an H100 pool a sixth of what it costs a V100 pool at the same hourly price."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec

from gateway.metering.cost import EXPECTED_TOKENS_PER_HOUR
from gateway.pipeline.flow import Flow, ServingOption
from gateway.pipeline.policy_view import PolicyView
from gateway.pipeline.pricing import Pricer
from gateway.providers.gemini import GeminiStream
from gateway.providers.sse import SSEEvent
from gateway.settings import load_settings
from gateway.usage import Usage
from gateway.wire.openai import ChatRequest
from tests.fakes.gemini_server import response_chunks, text_response
from tests.pipeline.support import KEY, write_config
from tests.providers.support import gemini_target, make_call
from tests.support.gateway_process import key_hash

GPU_HOUR = 4.0


def pool(gpu_class: str) -> dict[str, object]:
    return {
        "kind": "openai",
        "replicas": {"urls": ["http://127.0.0.1:9"], "gpu_class": gpu_class},
    }


def test_a_pools_gpu_class_sets_the_throughput_its_gpu_hour_is_spread_over(
    tmp_path: Path,
) -> None:
    models = {
        name: {
            "deployments": [{"provider": name, "upstream_model": "llama"}],
            "prices": {"input": 0, "output": 0, "gpu_hour": GPU_HOUR},
        }
        for name in ("h100", "v100")
    }
    policy = {"models": models, "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}}}
    providers = {"h100": pool("h100"), "v100": pool("v100")}
    settings = load_settings(write_config(tmp_path, "", policy, providers=providers))
    view = PolicyView.build(settings.policy)
    pricer = Pricer(settings.config.providers)
    usage = Usage(input_tokens=1_000, output_tokens=500)
    request = msgspec.convert(
        {"model": "h100", "messages": [{"role": "user", "content": "x"}]}, ChatRequest
    )

    costs = {}
    for name in ("h100", "v100"):
        model = settings.policy.models[name]
        deployment = model.deployments[0]
        flow = Flow(request_id=name, started=0.0, created=0, view=view, request=request)
        flow.served_by = ServingOption(model=name, settings=model, deployment=deployment)
        flow.usage = usage
        pricer.price(flow)
        assert flow.cost is not None
        costs[name] = flow.cost

    for name, cost in costs.items():
        expected = Decimal(1_500) * Decimal(repr(GPU_HOUR)) / EXPECTED_TOKENS_PER_HOUR[name]
        # the request's own tokens already count toward the window: a hair off expected
        assert abs(cost / expected - 1) < Decimal("0.001"), name
    assert abs(costs["v100"] / costs["h100"] - 6) < Decimal("0.01")


def test_a_gemini_stream_abandoned_mid_way_bills_its_streamed_text_as_estimated(
    tmp_path: Path,
) -> None:
    model = {
        "deployments": [{"provider": "google", "upstream_model": "gemini-2.5-flash"}],
        "prices": {"input": "0.30", "output": "2.50"},
    }
    policy = {
        "models": {"gemini": model},
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }
    providers = {"google": {"kind": "gemini", "api_key": "x"}}
    settings = load_settings(write_config(tmp_path, "", policy, providers=providers))
    stream = GeminiStream(
        make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True}),
        gemini_target(),
    )
    answer = " ".join(f"word{i}" for i in range(60))
    chunks = response_chunks(text_response(answer, prompt_tokens=21, output_tokens=120))
    for chunk in chunks[:4]:  # the client leaves after four chunks
        stream.feed(SSEEvent(msgspec.json.encode(chunk)))
    request = msgspec.convert(
        {"model": "gemini", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        ChatRequest,
    )
    flow = Flow(
        request_id="r",
        started=0.0,
        created=0,
        view=PolicyView.build(settings.policy),
        request=request,
    )
    served = settings.policy.models["gemini"]
    flow.served_by = ServingOption(
        model="gemini", settings=served, deployment=served.deployments[0]
    )
    # what respond takes from a stream that ended early
    flow.usage, flow.unreported_text = stream.usage, stream.unreported_text
    Pricer(settings.config.providers).price(flow)
    assert flow.usage is not None and flow.usage.estimated
    assert flow.usage.input_tokens == 21
    assert 0 < flow.usage.output_tokens < 120
    expected = (21 * Decimal("0.30") + flow.usage.output_tokens * Decimal("2.50")) / 1_000_000
    assert flow.cost == expected
