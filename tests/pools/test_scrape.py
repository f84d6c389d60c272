from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.pools import ReplicaPool, parse_metrics
from gateway.settings.server import ReplicaPoolSettings

VLLM_PAGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 5.0
vllm:num_requests_running{engine="1",model_name="llama"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 3.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="llama"} 0.25
vllm:gpu_cache_usage_perc{engine="1",model_name="llama"} 0.75
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 400.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 100.0
"""


def test_vllm_pages_sum_counts_and_take_the_fullest_cache() -> None:
    load = parse_metrics(VLLM_PAGE, "vllm")
    assert (load.running, load.queued, load.kv_usage) == (7, 3, 0.75)
    assert load.cache_hit_rate == 0.25


def test_a_page_without_the_series_reads_as_idle() -> None:
    load = parse_metrics("# nothing here\n", "sglang")
    assert (load.running, load.queued, load.kv_usage, load.cache_hit_rate) == (0, 0, 0.0, None)


def test_a_page_that_is_not_prometheus_text_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics("<html><body>502 Bad Gateway</body></html>", "sglang")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_emulator(style: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.emulator",
            "--port",
            str(port),
            "--time-scale",
            "1",
            "--output-tokens",
            "2000:2000",
            "--metrics-style",
            style,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{root}/health", timeout=1).is_success:
                return process, f"{root}/v1"
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the emulator did not start")


@pytest.fixture(params=["sglang", "vllm"])
def emulator(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    process, base_url = start_emulator(request.param)
    yield base_url, request.param
    process.terminate()
    process.wait(timeout=10)


def test_the_pool_reads_a_real_emulators_load(emulator: tuple[str, str]) -> None:
    base_url, style = emulator
    system = "You are the emulator's test assistant. " * 40
    body = {
        "model": "emulated-model",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        "max_tokens": 2000,
        "stream": True,
    }

    async def scenario() -> None:
        settings = ReplicaPoolSettings.model_validate(
            {"urls": [base_url], "metrics_style": style, "scrape_interval_seconds": 30}
        )
        pool = ReplicaPool("emulated", settings)
        async with httpx.AsyncClient(timeout=30) as client:
            try:
                async with client.stream("POST", f"{base_url}/chat/completions", json=body) as r:
                    # one line in, the sequence is running on the emulated GPU; the iterator
                    # stays referenced, since closing it would close the connection
                    lines = r.aiter_lines()
                    await anext(lines)
                    await pool.check_now()
                    page = (await client.get(base_url.removesuffix("/v1") + "/metrics")).text
                view = pool.views()[0]
                assert view.running == 1, page
                assert view.healthy
                assert view.running == 1
                assert view.queue_depth == 0
                assert 0 < view.kv_usage < 0.01
            finally:
                await pool.stop()

    asyncio.run(scenario())
