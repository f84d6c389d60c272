"""Breakers that never turn upstream noise into an outage, through real `gateway serve`
processes, the official `openai` SDK, and fake upstreams that script faults.

Outcomes and upstream call counts are asserted, never durations: where a test waits for
something to happen (a circuit to half-open, a replica to see another's ejection) it
polls for the outcome with a generous bound.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.support import HELLO, async_client, close_all, start_all, stop_all, store_config
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

KEY = "sk-e2e-breakers"


def policy(models: dict[str, str], routes: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """`models`: model name -> provider; each model has one deployment."""
    return {
        "models": {
            name: {"deployments": [{"provider": provider, "upstream_model": f"{name}-up"}]}
            for name, provider in models.items()
        },
        "routes": {
            name: {"strategy": "ordered", "models": chain} for name, chain in (routes or {}).items()
        },
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=60)


def ask(gateway_client: openai.OpenAI, model: str) -> tuple[int, dict[str, str], str]:
    """(status, headers, answer text or error code) of one completion."""
    try:
        raw = gateway_client.chat.completions.with_raw_response.create(model=model, messages=HELLO)
    except openai.APIStatusError as error:
        return error.status_code, dict(error.response.headers), str(error.code)
    text = raw.parse().choices[0].message.content or ""
    return raw.status_code, dict(raw.headers), text


def route_parts(headers: dict[str, str]) -> dict[str, str]:
    """`x-gateway-route: auto; served=spare; reason=...` as {"served": "spare", ...}."""
    parts = [p.strip() for p in headers.get("x-gateway-route", "").split(";")]
    return dict(p.split("=", 1) for p in parts if "=" in p)


def metric(gateway: GatewayProcess, name: str, **labels: str) -> float:
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def until(predicate: Any, bound_seconds: float = 30.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + bound_seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


# --- upstream noise is not an outage -----------------------------------------------------


def test_429s_then_500s_then_200_concurrent_streams_are_all_served_by_the_defaults() -> None:
    """The issue's scenario with the shipped breaker defaults and one deployment."""
    with OpenAIFake() as upstream:
        config = {
            "providers": {
                # breaker: the defaults; retries: 4 attempts, so three 429s leave a 4th
                "up": openai_provider(
                    upstream.base_url,
                    retry={"max_attempts": 4, "base_delay_seconds": 0.01},
                )
            }
        }
        with GatewayProcess(config, policy({"m": "up"})) as gateway:
            sdk = client(gateway)
            # OpenAI's own hint in milliseconds: each is waited out (the retry and the
            # breaker's cool-down both follow it), in a tenth of Retry-After's 1 s minimum
            slow_down = Reply.error(429, "slow down", headers={"retry-after-ms": "100"})
            upstream.enqueue(*[slow_down] * 3)
            status, headers, _ = ask(sdk, "m")
            assert status == 200
            assert len(upstream.requests) == 4  # three 429s waited out, then served
            assert route_parts(headers)["attempts"] == "m:429,m:429,m:429"
            assert "fallback-from" not in route_parts(headers)  # nothing else was tried

            upstream.enqueue(Reply.error(500, "boom"), Reply.error(500, "boom"))
            status, headers, _ = ask(sdk, "m")
            assert status == 200
            assert len(upstream.requests) == 7
            assert route_parts(headers)["attempts"] == "m:500,m:500"

            for _ in range(20):
                status, headers, _ = ask(sdk, "m")
                assert status == 200
                assert "attempts" not in route_parts(headers)
            assert len(upstream.requests) == 27

            async def streams() -> list[str]:
                clients = [async_client(gateway, KEY)]

                async def one(i: int) -> str:
                    stream = await clients[0].chat.completions.create(
                        model="m",
                        messages=[{"role": "user", "content": f"stream {i}"}],
                        stream=True,
                    )
                    return "".join([c.choices[0].delta.content or "" async for c in stream])

                try:
                    return list(await asyncio.gather(*(one(i) for i in range(200))))
                finally:
                    await close_all(clients)

            texts = asyncio.run(streams())
            assert texts == [f"echo: stream {i}" for i in range(200)]
            assert len(upstream.requests) == 227


def test_a_dead_upstream_sheds_to_the_fallback_and_gets_traffic_back_once_healed() -> None:
    with OpenAIFake() as primary, OpenAIFake() as spare:
        config = {
            "providers": {
                "primary": openai_provider(
                    primary.base_url,
                    retry={"max_attempts": 2, "base_delay_seconds": 0.01},
                    breaker={"failure_threshold": 2, "open_seconds": 0.5},
                ),
                "spare": openai_provider(spare.base_url),
            }
        }
        routes = {"auto": ["main", "backup"]}
        with GatewayProcess(config, policy({"main": "primary", "backup": "spare"}, routes)) as gw:
            sdk = client(gw)
            assert ask(sdk, "auto")[1]["x-gateway-model"] == "main"
            primary.__exit__(None, None, None)  # connection refused from now on

            # two requests fail over (each tried main twice), then the circuit is open
            for _ in range(2):
                status, headers, _ = ask(sdk, "auto")
                assert status == 200 and headers["x-gateway-model"] == "backup"
                assert route_parts(headers)["fallback-from"].startswith("main:")
            status, headers, _ = ask(sdk, "auto")
            assert status == 200 and headers["x-gateway-model"] == "backup"
            parts = route_parts(headers)
            assert parts["skipped"] == "main:circuit_open"
            assert "fallback-from" not in parts  # main was not tried, so no fallback from it

            primary.__enter__()  # healed, on the same port
            served_before = len(primary.requests)
            assert until(lambda: ask(sdk, "auto")[1]["x-gateway-model"] == "main")
            # back to full traffic: every following request goes to main
            answers = [ask(sdk, "auto")[1]["x-gateway-model"] for _ in range(10)]
            assert answers == ["main"] * 10
            assert len(primary.requests) >= served_before + 10


def test_the_only_deployment_dead_gets_panic_attempts_or_a_fast_503() -> None:
    with OpenAIFake() as panicking, OpenAIFake() as failing_fast:
        breaker = {"failure_threshold": 1, "open_seconds": 30}
        config = {
            "providers": {
                "p": openai_provider(
                    panicking.base_url, retry={"max_attempts": 1}, breaker=breaker
                ),
                "f": openai_provider(
                    failing_fast.base_url,
                    retry={"max_attempts": 1},
                    breaker={**breaker, "when_all_open": "fail_fast"},
                ),
            }
        }
        with GatewayProcess(config, policy({"pm": "p", "fm": "f"})) as gateway:
            sdk = client(gateway)
            panicking.enqueue(Reply.error(500, "dead"), Reply.error(500, "dead"))
            failing_fast.enqueue(Reply.error(500, "dead"))
            # the first failure opens both circuits
            assert ask(sdk, "pm")[0] == 502
            assert ask(sdk, "fm")[0] == 502

            # panic (the default): still sent to the only deployment, and said so
            status, headers, _ = ask(sdk, "pm")
            assert status == 502
            assert route_parts(headers)["reason"] == "panic"
            assert len(panicking.requests) == 2
            status, headers, text = ask(sdk, "pm")
            assert status == 200 and text
            assert route_parts(headers)["reason"] == "panic"
            assert len(panicking.requests) == 3
            assert metric(gateway, "gateway_breaker_panics_total", deployment="p/pm-up") == 2

            # fail_fast: 503 with retry-after, the upstream is left alone
            status, headers, code = ask(sdk, "fm")
            assert status == 503
            assert code == "circuit_open"
            assert 1 <= int(headers["retry-after"]) <= 30
            assert len(failing_fast.requests) == 1
            assert metric(gateway, "gateway_breaker_fail_fast_total") == 1


def test_a_502_after_several_candidates_names_every_attempt() -> None:
    with OpenAIFake() as first, OpenAIFake() as second:
        config = {
            "providers": {
                "a": openai_provider(first.base_url, retry={"max_attempts": 2}),
                "b": openai_provider(second.base_url, retry={"max_attempts": 1}),
            }
        }
        routes = {"auto": ["one", "two"]}
        with GatewayProcess(config, policy({"one": "a", "two": "b"}, routes)) as gateway:
            first.enqueue(Reply.error(503, "down"), Reply.error(500, "down"))
            second.enqueue(Reply.error(502, "down"))
            sdk = client(gateway)
            with pytest.raises(openai.InternalServerError) as raised:
                sdk.chat.completions.create(model="auto", messages=HELLO)
            error = raised.value
            parts = route_parts(dict(error.response.headers))
            assert parts["attempts"] == "one:503,one:500,two:502"
            # fell back from one to two; two failing last is not a fallback from it
            assert parts["fallback-from"] == "one:500"
            assert "one:503, one:500, two:502" in error.message
            assert until(lambda: '"attempts":"one:503,one:500,two:502"' in gateway.log())


def test_streams_that_break_mid_way_open_the_circuit() -> None:
    with OpenAIFake() as primary, OpenAIFake() as spare:
        config = {
            "providers": {
                "primary": openai_provider(
                    primary.base_url, breaker={"failure_threshold": 2, "open_seconds": 60}
                ),
                "spare": openai_provider(spare.base_url),
            }
        }
        routes = {"auto": ["main", "backup"]}
        with GatewayProcess(config, policy({"main": "primary", "backup": "spare"}, routes)) as gw:
            sdk = client(gw)
            primary.enqueue(*[Reply(words=["a", "b", "c"], fail_after_chunks=1)] * 2)
            for _ in range(2):
                stream = sdk.chat.completions.create(model="auto", messages=HELLO, stream=True)
                with pytest.raises(openai.APIError):
                    for _chunk in stream:
                        pass
            # both streams broke after their first byte (no retry possible): two failures
            status, headers, _ = ask(sdk, "auto")
            assert status == 200 and headers["x-gateway-model"] == "backup"
            assert route_parts(headers)["skipped"] == "main:circuit_open"
            assert len(primary.requests) == 2


# --- shared across replicas --------------------------------------------------------------


def test_replicas_on_one_redis_share_ejections_and_survive_redis_dying() -> None:
    redis_server = RedisServer()
    redis_server.start()
    try:
        with OpenAIFake() as primary, OpenAIFake() as spare:
            shared = {"failure_threshold": 2, "open_seconds": 60, "shared": True}
            config = {
                # a short grace: the ledger cannot flush to a dead Redis at shutdown
                "server": {"shutdown_grace_seconds": 1},
                "store": store_config(redis_server.url, timeout_ms=500),
                "providers": {
                    "primary": openai_provider(
                        primary.base_url,
                        retry={"max_attempts": 1},
                        breaker={**shared, "sync_seconds": 0.1},
                    ),
                    "spare": openai_provider(spare.base_url),
                },
            }
            routes = {"auto": ["main", "backup"]}
            the_policy = policy({"main": "primary", "backup": "spare"}, routes)
            one, two = start_all(GatewayProcess(config, the_policy) for _ in range(2))
            try:
                first, second = client(one), client(two)
                assert ask(second, "auto")[1]["x-gateway-model"] == "main"
                # let the second replica's batched success reach Redis first: a success
                # between the failures would (rightly) break their run
                time.sleep(0.5)
                primary.enqueue(Reply.error(500, "down"), Reply.error(500, "down"))
                for _ in range(2):
                    assert ask(first, "auto")[1]["x-gateway-model"] == "backup"
                calls = len(primary.requests)

                # the second replica never saw a failure; without any traffic of its own,
                # its next sync (every sync_seconds) brings the ejection over
                assert until(
                    lambda: metric(two, "gateway_circuit_state", deployment="primary/main-up") == 2
                )
                for _ in range(5):
                    status, headers, _ = ask(second, "auto")
                    assert status == 200 and headers["x-gateway-model"] == "backup"
                    assert route_parts(headers)["skipped"] == "main:circuit_open"
                assert len(primary.requests) == calls

                # Redis dies: both replicas keep serving on their local breakers
                redis_server.stop(kill=True)
                for gateway_client in (first, second) * 5:
                    status, _, text = ask(gateway_client, "auto")
                    assert status == 200 and text
                assert "deciding locally" in one.log() + two.log()
            finally:
                stop_all([one, two])
    finally:
        redis_server.stop()
