"""A rolling restart of three gateway processes under load, as a Deployment rollout does
it with maxUnavailable 0: start the replacement, wait until it is ready, SIGTERM the old
one and take it out of the endpoints 0.3 s later (no preStop pause: the strictest case,
where new requests still reach a gateway that has stopped accepting); the next
replacement starts while the old one drains, as the Deployment's surge allows (the
first is started with the fleet, the others under the load). The client is the official
`openai` SDK with its default retries (connection errors, and 5xx, which the test counts
separately so a retry can hide nothing), behind a round-robin transport that stands for
the Service's load balancing. Nothing fails, streams in flight on a terminated gateway
finish, and the ledger has exactly the requests served."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import openai
import pytest

from tests.e2e.support import (
    ledger_records,
    model,
    server_config,
    start_all,
    stop_all,
    store_config,
    tenant,
    wait_for,
)
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

GATEWAYS = 3
KEY = "sk-fleet-rollout"
LOAD_WORKERS = 8
STREAMS_PER_GATEWAY = 2
ENDPOINT_LAG_SECONDS = 0.3
STREAM_WORDS = [f"w{i}" for i in range(40)]
CHUNK_DELAY = 0.05  # a stream lasts ~2 s: it is in flight when its gateway gets SIGTERM
GRACE_SECONDS = 10


class Endpoints:
    """The gateway ports the load balancer sends new requests to, round robin."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = list(ports)
        self._lock = threading.Lock()
        self._turn = 0

    def add(self, port: int) -> None:
        with self._lock:
            self._ports.append(port)

    def remove(self, port: int) -> None:
        with self._lock:
            self._ports.remove(port)

    def next(self) -> int:
        with self._lock:
            self._turn += 1
            return self._ports[self._turn % len(self._ports)]


@dataclass
class Attempts:
    """What the transport saw, attempt by attempt (the SDK retries through it)."""

    connection_errors: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)


class RoundRobinTransport(httpx2.AsyncBaseTransport):
    def __init__(self, endpoints: Endpoints, attempts: Attempts) -> None:
        self._endpoints = endpoints
        self._attempts = attempts
        self._per_port: dict[int, httpx2.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self._endpoints.next()
        request.url = request.url.copy_with(port=port)
        transport = self._per_port.setdefault(port, httpx2.AsyncHTTPTransport())
        try:
            response = await transport.handle_async_request(request)
        except httpx2.TransportError as error:
            self._attempts.connection_errors[type(error).__name__] += 1
            raise
        self._attempts.statuses[response.status_code] += 1
        return response

    async def aclose(self) -> None:
        for transport in self._per_port.values():
            await transport.aclose()


def balanced_client(endpoints: Endpoints, attempts: Attempts) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1:1/v1",  # the transport picks the port
        api_key=KEY,
        max_retries=2,  # the SDK's default
        timeout=30,
        http_client=openai.DefaultAsyncHttpxClient(
            transport=RoundRobinTransport(endpoints, attempts)
        ),
    )


@dataclass
class Outcome:
    request_id: str | None = None
    error: str | None = None
    text: str = ""
    usage_tokens: int = 0


async def one_request(client: openai.AsyncOpenAI) -> Outcome:
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="chat-model", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
    except openai.OpenAIError as error:
        return Outcome(error=f"{type(error).__name__}: {error}")
    return Outcome(request_id=raw.headers["x-request-id"], text=str(raw.parse().id))


async def one_stream(gateway: GatewayProcess, first_chunk: asyncio.Event) -> Outcome:
    """A stream pinned to `gateway` (its connection is already there when SIGTERM comes)."""
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=30)
    outcome = Outcome()
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="stream-model",
            messages=[{"role": "user", "content": "a long answer please"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        outcome.request_id = raw.headers["x-request-id"]
        async for chunk in raw.parse():
            first_chunk.set()
            if chunk.choices and chunk.choices[0].delta.content:
                outcome.text += chunk.choices[0].delta.content
            if chunk.usage is not None:
                outcome.usage_tokens = chunk.usage.completion_tokens
    except openai.OpenAIError as error:
        outcome.error = f"{type(error).__name__}: {error}"
    finally:
        first_chunk.set()
        await client.close()
    return outcome


@pytest.fixture
def fast_upstream() -> Iterator[OpenAIFake]:
    with OpenAIFake() as fake:
        yield fake


@pytest.fixture
def slow_upstream() -> Iterator[OpenAIFake]:
    with OpenAIFake() as fake:
        # every request to this upstream is a stream of the test's
        fake.enqueue(
            *[
                Reply(words=STREAM_WORDS, chunk_delay=CHUNK_DELAY)
                for _ in range(STREAMS_PER_GATEWAY * GATEWAYS)
            ]
        )
        yield fake


def fleet_config(fast: OpenAIFake, slow: OpenAIFake, redis_url: str) -> dict[str, Any]:
    store = store_config(redis_url, timeout_ms=5000, on_failure="fail_closed")
    config = server_config(fast.base_url, store, grace_seconds=GRACE_SECONDS)
    config["providers"]["slow"] = {**config["providers"]["fake"], "base_url": slow.base_url}
    return config


def fleet_policy() -> dict[str, Any]:
    streaming = model("upstream-stream", 1, 2)
    streaming["deployments"][0]["provider"] = "slow"
    return {
        "models": {"chat-model": model("upstream-chat", 1, 2), "stream-model": streaming},
        "tenants": {"rollout": tenant("rollout", KEY, limits={"requests_per_minute": 100_000})},
    }


def ledger_ids(redis_url: str) -> Counter[str]:
    return Counter(r.request_id for r in ledger_records(redis_url) if r.tenant == "rollout")


def ready(gateway: GatewayProcess) -> bool:
    try:
        return httpx.get(gateway.url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_rolling_restart_under_load_fails_no_request_and_finishes_every_stream(
    fast_upstream: OpenAIFake, slow_upstream: OpenAIFake
) -> None:
    redis_server = RedisServer()
    redis_server.start()
    config = fleet_config(fast_upstream, slow_upstream, redis_server.url)
    policy = fleet_policy()
    # the first replacement starts beside the fleet (the later ones start under the load)
    fleet = start_all(GatewayProcess(config, policy) for _ in range(GATEWAYS + 1))
    gateways, replaced = fleet[:GATEWAYS], fleet[GATEWAYS:]
    assert wait_ready(replaced[0])
    endpoints = Endpoints([g.port for g in gateways])
    attempts = Attempts()
    outcomes: list[Outcome] = []
    streams: list[Outcome] = []
    exits: list[tuple[int | None, float]] = []

    async def load(client: openai.AsyncOpenAI, stop: asyncio.Event) -> None:
        while not stop.is_set():
            outcomes.append(await one_request(client))

    def start_next() -> asyncio.Task[GatewayProcess]:
        # `replaced` holds it from before its start: stopped at the end whatever happens
        return asyncio.create_task(asyncio.to_thread(start_replacement, config, policy, replaced))

    async def replace(
        old: GatewayProcess, new: GatewayProcess, last: bool
    ) -> asyncio.Task[GatewayProcess] | None:
        endpoints.add(new.port)
        # streams already running on the old gateway when it is told to go
        started = [asyncio.Event() for _ in range(STREAMS_PER_GATEWAY)]
        running = [asyncio.create_task(one_stream(old, event)) for event in started]
        await asyncio.gather(*(event.wait() for event in started))
        signalled = time.monotonic()
        old.signal()
        # the endpoint goes a moment after SIGTERM, as when no preStop pause covers the
        # endpoint removal: requests in that window meet a closed port, and the SDK retries
        await asyncio.sleep(ENDPOINT_LAG_SECONDS)
        endpoints.remove(old.port)
        # as a Deployment does: the terminating pod no longer counts, so the next
        # replacement starts while this one drains
        following = None if last else start_next()
        code = await asyncio.to_thread(old.stop)
        exits.append((code, time.monotonic() - signalled))
        streams.extend(await asyncio.gather(*running))
        return following

    async def rollout() -> None:
        client = balanced_client(endpoints, attempts)
        stop = asyncio.Event()
        workers = [asyncio.create_task(load(client, stop)) for _ in range(LOAD_WORKERS)]
        await asyncio.sleep(1.0)
        new = replaced[0]
        for i, old in enumerate(gateways):
            following = await replace(old, new, last=i == len(gateways) - 1)
            if following is not None:
                new = await following
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*workers)
        await client.close()

    try:
        asyncio.run(rollout())
        failed = [o.error for o in outcomes if o.error is not None]
        assert not failed, Counter(failed)
        assert len(outcomes) > 100
        # the SDK retried connection errors only: no gateway ever answered 5xx
        assert set(attempts.statuses) == {200}, attempts.statuses
        assert [code for code, _ in exits] == [0] * GATEWAYS, exits
        assert all(seconds < GRACE_SECONDS for _, seconds in exits), exits
        for stream in streams:
            assert stream.error is None, stream.error
            assert stream.text.split() == STREAM_WORDS
            assert stream.usage_tokens == len(STREAM_WORDS)
        assert len(streams) == STREAMS_PER_GATEWAY * GATEWAYS

        served = Counter(o.request_id for o in [*outcomes, *streams] if o.request_id)
        assert all(count == 1 for count in served.values())
        assert wait_for(lambda: ledger_ids(redis_server.url) == served, 15), (
            len(ledger_ids(redis_server.url)),
            len(served),
        )
        print(
            f"rollout: {len(outcomes)} requests and {len(streams)} streams, 0 failed; "
            f"{sum(attempts.connection_errors.values())} connection errors retried by the SDK "
            f"({dict(attempts.connection_errors)}); old gateways exited 0 after "
            f"{', '.join(f'{s:.1f}' for _, s in exits)} s; ledger = {len(served)} served"
        )
    finally:
        stop_all([*gateways, *replaced])
        redis_server.stop()


def start_replacement(
    config: dict[str, Any], policy: dict[str, Any], started: list[GatewayProcess]
) -> GatewayProcess:
    """A new gateway process, ready, and in `started` from before it starts. Its free
    port can be taken by one of the load's own outgoing connections before it binds (both
    come from the ephemeral range): then it starts again on another."""
    for _ in range(3):
        gateway = GatewayProcess(config, policy)
        started.append(gateway)
        try:
            gateway.start()
        except RuntimeError as error:
            if "address already in use" not in str(error):
                raise
            continue
        assert wait_ready(gateway)
        return gateway
    raise RuntimeError("no free port for the replacement gateway")


def wait_ready(gateway: GatewayProcess, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready(gateway):
            return True
        time.sleep(0.05)
    return False
