"""What the end-to-end tests share: real `gateway serve` processes on one real Redis in
front of the fake OpenAI upstream, the official `openai` SDK as the client, and readers
of the ledger the gateways write."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import openai
import redis

from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger_record import LedgerRecord
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

ADMIN_KEY = "gw-e2e-admin-key"
HELLO = [{"role": "user", "content": "hi"}]


def store_config(
    redis_url: str,
    *,
    timeout_ms: int,
    on_failure: str = "fail_open",
    probe_interval_seconds: float = 0.2,
    spill_dir: str | None = None,
) -> dict[str, Any]:
    store: dict[str, Any] = {
        "kind": "redis",
        "redis_url": redis_url,
        "timeout_ms": timeout_ms,
        "on_failure": on_failure,
        "cluster": False,
        "probe_interval_seconds": probe_interval_seconds,
    }
    if spill_dir is not None:
        store["spill_dir"] = spill_dir
    return store


def server_config(
    upstream_url: str, store: dict[str, Any], *, grace_seconds: float = 5
) -> dict[str, Any]:
    return {
        "server": {
            "shutdown_grace_seconds": grace_seconds,
            "admin_key_hash": key_hash(ADMIN_KEY),
        },
        "store": store,
        "providers": {
            "fake": openai_provider(
                upstream_url,
                # the upstream never fails here: a breaker must not get in the way of load
                breaker={"failure_threshold": 100_000, "min_requests": 100_000},
            )
        },
    }


def model(upstream_model: str, input_price: float, output_price: float) -> dict[str, Any]:
    return {
        "deployments": [{"provider": "fake", "upstream_model": upstream_model}],
        "prices": {"input": input_price, "output": output_price},
    }


def tenant(key_id: str, key: str, **settings: Any) -> dict[str, Any]:
    """A tenant with one key; `limits=` goes on the key, anything else on the tenant."""
    entry: dict[str, Any] = {"id": key_id, "hash": key_hash(key)}
    if "limits" in settings:
        entry["limits"] = settings.pop("limits")
    return {"keys": [entry], **settings}


def start_all(gateways: Iterable[GatewayProcess]) -> list[GatewayProcess]:
    """Start gateways side by side (each takes seconds to import and bind)."""
    started = list(gateways)
    failures: list[BaseException] = []

    def start(gateway: GatewayProcess) -> None:
        try:
            gateway.start()
        except BaseException as error:  # reported below, on the test's thread
            failures.append(error)

    threads = [threading.Thread(target=start, args=(g,)) for g in started]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        stop_all(started)
        raise failures[0]
    return started


def stop_all(gateways: Iterable[GatewayProcess]) -> None:
    for gateway in gateways:
        gateway.stop()


def async_client(gateway: GatewayProcess, key: str, connections: int = 200) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=gateway.base_url,
        api_key=key,
        max_retries=0,
        timeout=60,
        http_client=openai.DefaultAsyncHttpxClient(
            limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
        ),
    )


def sync_client(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


@dataclass
class Answer:
    """One chat completion as the client saw it."""

    status: int
    headers: dict[str, str]
    error: openai.APIStatusError | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    @property
    def request_id(self) -> str:
        return self.headers.get("x-request-id", "")

    @property
    def code(self) -> str | None:
        return None if self.error is None else self.error.code


async def ask(client: openai.AsyncOpenAI, model_name: str, **options: Any) -> Answer:
    """One non-streaming completion; a refusal is an Answer too, with the SDK's error."""
    options.setdefault("messages", HELLO)
    started = time.monotonic()
    try:
        raw = await client.chat.completions.with_raw_response.create(model=model_name, **options)
    except openai.APIStatusError as error:
        return Answer(
            error.status_code,
            dict(error.response.headers),
            error,
            seconds=time.monotonic() - started,
        )
    completion = raw.parse()
    usage = completion.usage
    return Answer(
        raw.status_code,
        dict(raw.headers),
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        seconds=time.monotonic() - started,
    )


async def spread(
    clients: list[openai.AsyncOpenAI], count: int, model_name: str, **options: Any
) -> list[Answer]:
    """`count` concurrent requests, round-robin over the clients (one per gateway)."""
    return list(
        await asyncio.gather(
            *(ask(clients[i % len(clients)], model_name, **options) for i in range(count))
        )
    )


async def close_all(clients: Iterable[openai.AsyncOpenAI]) -> None:
    for client in clients:
        await client.close()


def ledger_records(redis_url: str, prefix: str = "gw") -> list[LedgerRecord]:
    """Every record in the ledger's Redis Stream, oldest first."""
    client = redis.Redis.from_url(redis_url)
    try:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
            LedgerKeys(prefix).stream, "-", "+"
        )
    finally:
        client.close()
    return [LedgerRecord.from_json(fields[b"record"]) for _, fields in entries]


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def readiness(gateway: GatewayProcess) -> tuple[int, dict[str, Any]]:
    response = httpx.get(gateway.url + "/readyz", timeout=5)
    body: dict[str, Any] = response.json()
    return response.status_code, body


def forget_script(fake: OpenAIFake) -> None:
    """Drop scripted replies nobody consumed, so they cannot leak into the next test."""
    with fake._lock:
        fake._script.clear()


def tracebacks(gateways: Iterable[GatewayProcess]) -> str:
    """The tracebacks in the gateways' logs, for an assertion's message: a 500 seen in a
    fault test then names its cause instead of only its status."""
    found = []
    for gateway in gateways:
        log = gateway.log()
        start = log.find("Traceback")
        while start != -1:
            end = log.find("\n{", start)
            found.append(log[start : end if end != -1 else start + 4000])
            start = log.find("Traceback", start + 1)
    return "\n".join(found[-5:]) or "(no traceback in the gateways' logs)"
