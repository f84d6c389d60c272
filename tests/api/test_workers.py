"""Several workers behind one port: one /metrics exposition adds up all of them, and
forgets the live gauges of a worker that died."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import openai
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.multiprocess_values import FLUSH_SECONDS
from tests.api.conftest import CLIENT_KEY, policy_for
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, openai_provider
from tests.support.redis_server import RedisServer, free_port

HELLO = [{"role": "user", "content": "hi"}]


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
            deadline = time.monotonic() + 30
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


def worker_pids(supervisor_pid: int) -> set[int]:
    children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children")
    return {int(pid) for pid in children.read_text().split()}


def live_gauges(metrics_dir: Path, pid: int) -> dict[tuple[str, str], float]:
    """The live gauges one worker has written to its own files: (metric, label) -> value."""
    files = [str(path) for path in metrics_dir.glob(f"gauge_live*_{pid}.db")]
    return {
        (sample.name, ",".join(sample.labels.values())): sample.value
        for family in MultiProcessCollector.merge(files, accumulate=False)
        for sample in family.samples
    }


def scraped(gateway: GatewayProcess, name: str) -> dict[str, float]:
    """One metric's samples in /metrics (all workers merged): label values -> value."""
    text = httpx.get(gateway.url + "/metrics", timeout=60).text
    return {
        ",".join(sample.labels.values()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_a_killed_worker_leaves_no_in_flight_request_or_open_circuit_behind(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """SIGKILL of a worker holding a request in flight, with a circuit it opened: once the
    supervisor has replaced it, neither shows in /metrics any more."""
    metrics_dir = tmp_path / "metrics"
    with OpenAIFake() as fake:
        never_answers = openai_provider(
            f"http://127.0.0.1:{free_port()}/v1",
            retry={"max_attempts": 1},
            breaker={"failure_threshold": 2, "min_requests": 1000, "open_seconds": 300},
        )
        config = {
            "store": {"kind": "redis", "redis_url": redis_server.url, "key_prefix": "dead-worker"},
            "providers": {"fake": openai_provider(fake.base_url), "down": never_answers},
        }
        policy = policy_for()
        policy["models"]["down-model"] = {
            "deployments": [{"provider": "down", "upstream_model": "upstream-down"}],
            "prices": {"input": 1.0, "output": 2.0},
        }
        env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        with GatewayProcess(config, policy, env=env, workers=2) as gateway:
            assert gateway.process is not None
            # one keep-alive connection: every request below reaches the same worker
            http = httpx.Client(timeout=60)
            client = openai.OpenAI(
                base_url=gateway.base_url, api_key=CLIENT_KEY, http_client=http, max_retries=0
            )
            for _ in range(3):
                with contextlib.suppress(openai.APIError):
                    client.chat.completions.create(model="down-model", messages=HELLO)
            fake.enqueue(Reply(delay=120))

            def hold() -> None:
                with contextlib.suppress(openai.APIError):  # cut by the kill
                    client.chat.completions.create(model="fast-model", messages=HELLO)

            held = threading.Thread(target=hold)
            held.start()

            def holder() -> int | None:
                for pid in worker_pids(gateway.process.pid):  # type: ignore[union-attr]
                    gauges = live_gauges(metrics_dir, pid)
                    if gauges.get(("gateway_requests_in_flight", "fast-model")) == 1:
                        return pid
                return None

            # generous deadlines: a loaded 2-core machine takes many seconds to start a worker
            deadline = time.monotonic() + 60
            while (worker := holder()) is None:
                assert time.monotonic() < deadline, "no worker shows the request in flight"
                time.sleep(FLUSH_SECONDS / 5)
            gauges = live_gauges(metrics_dir, worker)
            opened = [
                label
                for (name, label), value in gauges.items()
                if name == "gateway_circuit_state" and value == 2.0
            ]
            assert len(opened) == 1, f"one circuit open on the worker in flight: {gauges}"
            down = opened[0]
            assert scraped(gateway, "gateway_requests_in_flight")["fast-model"] == 1
            assert scraped(gateway, "gateway_circuit_state")[down] == 2.0

            os.kill(worker, signal.SIGKILL)
            held.join(timeout=30)
            http.close()
            deadline = time.monotonic() + 60
            while worker in (pids := worker_pids(gateway.process.pid)) or len(pids) < 2:
                assert time.monotonic() < deadline, "the supervisor did not replace the worker"
                time.sleep(0.1)
            assert gateway.process.poll() is None
            deadline = time.monotonic() + 30
            while (
                scraped(gateway, "gateway_requests_in_flight").get("fast-model", 0) != 0
                or scraped(gateway, "gateway_circuit_state").get(down, 0) == 2.0
            ):
                assert time.monotonic() < deadline, (
                    "the dead worker's gauges are still in /metrics: "
                    f"in flight {scraped(gateway, 'gateway_requests_in_flight')}, "
                    f"circuits {scraped(gateway, 'gateway_circuit_state')}"
                )
                time.sleep(FLUSH_SECONDS / 5)
            assert not list(metrics_dir.glob(f"gauge_live*_{worker}.db"))
