"""Client disconnects mid-stream, graceful shutdown, health and readiness."""

from __future__ import annotations

import signal
import socket
import threading
import time

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import CLIENT_KEY, policy_for
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, openai_provider

USER = [{"role": "user", "content": "tell me a long story"}]


def wait_for(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_client_disconnect_mid_stream_cancels_the_upstream_request(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    before = fake.disconnects
    fake.enqueue(Reply(words=[f"w{i}" for i in range(200)], chunk_delay=0.05))
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    stream = client.chat.completions.create(model="fast-model", messages=USER, stream=True)
    seen = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
        if seen == 3:
            break
    stream.close()
    # the fake upstream notices its connection closed within one chunk interval
    assert wait_for(lambda: fake.disconnects > before, timeout=3)


def test_health_and_readiness(gateway: GatewayProcess) -> None:
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True


def test_metrics_count_requests_and_tokens_exactly(gateway: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    served = {"model": "fast-model", "provider": "fake"}
    before = _samples(gateway)
    reply = client.chat.completions.create(model="fast-model", messages=USER)
    after = _samples(gateway)
    assert reply.usage is not None
    requests = ("gateway_requests_total", {**served, "route": "fast-model", "code": "200"})
    assert _delta(before, after, *requests) == 1
    input_tokens = ("gateway_tokens_total", {**served, "kind": "input"})
    output_tokens = ("gateway_tokens_total", {**served, "kind": "output"})
    assert _delta(before, after, *input_tokens) == reply.usage.prompt_tokens
    assert _delta(before, after, *output_tokens) == reply.usage.completion_tokens


Samples = list[tuple[str, dict[str, str], float]]


def _samples(gateway: GatewayProcess) -> Samples:
    text = httpx.get(gateway.url + "/metrics").text
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _delta(before: Samples, after: Samples, name: str, labels: dict[str, str]) -> float:
    def total(samples: Samples) -> float:
        return sum(
            value
            for sample_name, sample_labels, value in samples
            if sample_name == name and labels.items() <= sample_labels.items()
        )

    return total(after) - total(before)


def test_sigterm_lets_in_flight_streams_finish_then_exits_zero() -> None:
    with OpenAIFake() as fake:
        process = GatewayProcess(
            {
                "server": {"shutdown_grace_seconds": 10},
                "providers": {"fake": openai_provider(fake.base_url)},
            },
            policy_for(),
        ).start()
        fake.enqueue(Reply(words=[f"w{i}" for i in range(20)], chunk_delay=0.05))
        client = openai.OpenAI(base_url=process.base_url, api_key=CLIENT_KEY, max_retries=0)
        words: list[str] = []

        def consume() -> None:
            stream = client.chat.completions.create(model="fast-model", messages=USER, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    words.append(chunk.choices[0].delta.content)

        reader = threading.Thread(target=consume)
        reader.start()
        assert wait_for(lambda: len(words) >= 2)
        process.signal(signal.SIGTERM)
        time.sleep(0.2)
        # no longer accepting new connections
        refused = False
        try:
            socket.create_connection(("127.0.0.1", process.port), timeout=0.5).close()
        except OSError:
            refused = True
        reader.join(timeout=10)
        assert len(words) == 20
        assert process.process is not None
        assert process.process.wait(timeout=10) == 0
        assert refused
        process.stop()
