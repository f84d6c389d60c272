"""What the real-backend tests read from llama-server directly, bypassing the gateway:
its `/metrics` and `/slots`, so the gateway's view can be checked against the server's."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway_process import GatewayProcess, key_hash
from tools.llamacpp.replicas import LlamaServer

CLIENT_KEY = "gw-real-backend-key"
MODEL = "tiny-llama"

_WORDS = [
    "invoice",
    "shipment",
    "refund",
    "ledger",
    "contract",
    "warranty",
    "region",
    "tariff",
    "customer",
    "escalation",
    "priority",
    "outage",
    "latency",
    "compliance",
    "audit",
    "retention",
    "schema",
    "pipeline",
    "forecast",
    "supplier",
]


def system_prompt(n: int, words: int = 600) -> str:
    """A long system prompt, different for every `n`, the same on every run."""
    rng = random.Random(n)
    return f"You are agent {n} of the operations team. " + " ".join(
        rng.choice(_WORDS) for _ in range(words)
    )


def pool_gateway(
    urls: list[str], balancer: str = "prefix_affinity", **replicas: Any
) -> GatewayProcess:
    """A `gateway serve` whose one model is a llama.cpp pool over `urls`."""
    config = {
        "providers": {
            "llama": {
                "kind": "openai",
                "timeouts": {"connect": 1, "read": 60},
                "retry": {"max_attempts": 3, "base_delay_seconds": 0.01},
                # a kill test must not open the breaker of the survivor
                "breaker": {"failure_threshold": 1000, "min_requests": 1000},
                "replicas": {
                    "urls": urls,
                    "balancer": balancer,
                    "metrics_style": "llamacpp",
                    "scrape_interval_seconds": 0.25,
                    **replicas,
                },
            }
        }
    }
    policy = {
        "models": {
            MODEL: {
                "deployments": [{"provider": "llama", "upstream_model": MODEL}],
                "prices": {"input": 0, "output": 0},
            }
        },
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(CLIENT_KEY)}]}},
    }
    return GatewayProcess(config, policy)


def client_for(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0, timeout=60)


def messages(system: str, user: str) -> list[Any]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def server_metrics(server: LlamaServer, client: httpx.Client | None = None) -> dict[str, float]:
    """The server's own `/metrics`, read with the Prometheus parser (not the gateway's)."""
    text = (client or httpx).get(server.root_url + "/metrics", timeout=5).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def server_slots(server: LlamaServer) -> list[dict[str, Any]]:
    slots: list[dict[str, Any]] = httpx.get(server.root_url + "/slots", timeout=5).json()
    return slots


def busy_slots(server: LlamaServer) -> int:
    return sum(bool(slot["is_processing"]) for slot in server_slots(server))


def wait_for(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass
class LoadWatcher:
    """Polls every server's `/metrics` in a thread while a load runs; keeps the peaks."""

    servers: Sequence[LlamaServer]
    max_deferred: float = 0.0
    max_processing: float = 0.0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LoadWatcher:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                self._sample(client)
                time.sleep(0.01)

    def _sample(self, client: httpx.Client) -> None:
        for server in self.servers:
            if not server.alive:
                continue
            try:
                metrics = server_metrics(server, client)
            except httpx.HTTPError:
                continue
            self.max_deferred = max(self.max_deferred, metrics["llamacpp:requests_deferred"])
            self.max_processing = max(self.max_processing, metrics["llamacpp:requests_processing"])
            self.samples += 1
