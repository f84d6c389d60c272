"""Rate limits through three real gateway processes sharing one Redis, seen by the
official `openai` SDK: one global limit, OpenAI's answers, and no leaked slots."""

from __future__ import annotations

import asyncio
import re
import time

import openai
import redis
from openai.types.chat import ChatCompletionMessageParam

from gateway.limits import redis_keys
from tests.e2e.conftest import (
    ANSWERS_KEY,
    BURST_KEY,
    GIANT_KEY,
    MAX_CONCURRENT,
    REQUESTS_PER_MINUTE,
    STREAMS_KEY,
    TOKENS_KEY,
    TOKENS_PER_MINUTE,
)
from tests.e2e.support import (
    Answer,
    async_client,
    close_all,
    forget_script,
    spread,
    sync_client,
    wait_for,
)
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

RATE_HEADERS = ("x-ratelimit-limit-{}", "x-ratelimit-remaining-{}", "x-ratelimit-reset-{}")
# 49 words: the fake echoes them back as a 50-token completion
LONG_PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": " ".join(["word"] * 49)}
]


async def refusal_message(client: openai.AsyncOpenAI) -> str:
    """The message of the 429 a request over a key's limit gets ("" when it is admitted,
    which every caller's assertion then catches)."""
    try:
        await client.chat.completions.create(
            model="chat-model", messages=[{"role": "user", "content": "go"}]
        )
    except openai.RateLimitError as error:
        return error.message
    return ""


def test_burst_of_500_over_three_gateways_admits_exactly_the_key_limit(
    replicas: list[GatewayProcess],
) -> None:
    async def burst() -> tuple[list[Answer], float]:
        clients = [async_client(g, BURST_KEY) for g in replicas]
        started = time.monotonic()
        answers = await spread(clients, 500, "chat-model")
        elapsed = time.monotonic() - started
        await close_all(clients)
        return answers, elapsed

    answers, elapsed = asyncio.run(burst())
    admitted = [a for a in answers if a.status == 200]
    refused = [a for a in answers if a.status == 429]
    assert len(admitted) + len(refused) == 500, sorted({a.status for a in answers})
    # a continuous bucket refills 100/60 per second while the burst runs
    refill = int(elapsed * REQUESTS_PER_MINUTE / 60)
    assert REQUESTS_PER_MINUTE <= len(admitted) <= REQUESTS_PER_MINUTE + refill, (
        len(admitted),
        elapsed,
    )
    assert {a.code for a in refused} == {"rate_limit_exceeded"}
    for answer in admitted:
        assert answer.headers["x-ratelimit-limit-requests"] == str(REQUESTS_PER_MINUTE)
        assert int(answer.headers["x-ratelimit-remaining-requests"]) < REQUESTS_PER_MINUTE
        assert answer.headers["x-ratelimit-reset-requests"]
    print(f"burst: {len(admitted)} of 500 admitted in {elapsed:.2f} s (refill allowance {refill})")


def test_tokens_per_minute_hold_within_one_reservation(
    replicas: list[GatewayProcess],
) -> None:
    async def run() -> tuple[int, list[Answer], float]:
        # one request on a fresh 1,000-token bucket shows what such a request reserves
        giant = async_client(replicas[0], GIANT_KEY)
        probe = await giant.chat.completions.with_raw_response.create(
            model="chat-model", messages=LONG_PROMPT, max_tokens=60
        )
        reservation = 1000 - int(probe.headers["x-ratelimit-remaining-tokens"])
        await giant.close()
        clients = [async_client(g, TOKENS_KEY) for g in replicas]
        started = time.monotonic()
        answers = await spread(clients, 120, "chat-model", messages=LONG_PROMPT, max_tokens=60)
        elapsed = time.monotonic() - started
        await close_all(clients)
        return reservation, answers, elapsed

    reservation, answers, elapsed = asyncio.run(run())
    admitted = [a for a in answers if a.status == 200]
    refused = [a for a in answers if a.status == 429]
    assert len(admitted) + len(refused) == len(answers)
    assert refused and {a.code for a in refused} == {"rate_limit_exceeded"}
    assert all("tokens per minute" in str(a.error) for a in refused)
    per_request = {a.prompt_tokens + a.completion_tokens for a in admitted}
    assert len(per_request) == 1
    actual = per_request.pop()
    used = sum(a.prompt_tokens + a.completion_tokens for a in admitted)
    allowance = TOKENS_PER_MINUTE + elapsed * TOKENS_PER_MINUTE / 60
    # what was really used never passes the bucket (plus refill) by more than one
    # request's reservation ...
    assert used <= allowance + reservation, (used, allowance, reservation)
    # ... and the bucket was really drawn down before anyone was refused
    assert used >= (TOKENS_PER_MINUTE - reservation) * actual // reservation
    print(
        f"tokens: {len(admitted)} admitted, {used} tokens used of {allowance:.0f} "
        f"(reservation {reservation}, actual {actual}) in {elapsed:.2f} s"
    )


def test_refusal_raises_rate_limit_error_with_openai_headers(
    replicas: list[GatewayProcess],
) -> None:
    # three requests per minute, taken on three different gateways
    for number, gateway in enumerate(replicas):
        raw = sync_client(gateway, ANSWERS_KEY).chat.completions.with_raw_response.create(
            model="chat-model", messages=[{"role": "user", "content": "hi"}], max_tokens=10
        )
        for kind in ("requests", "tokens"):
            for header in RATE_HEADERS:
                assert raw.headers[header.format(kind)], header.format(kind)
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        assert raw.headers["x-ratelimit-remaining-requests"] == str(2 - number)
        assert raw.headers["x-ratelimit-limit-tokens"] == "1000"
    client = sync_client(replicas[0], ANSWERS_KEY)
    try:
        client.chat.completions.create(
            model="chat-model", messages=[{"role": "user", "content": "hi"}], max_tokens=10
        )
    except openai.RateLimitError as error:
        refusal = error
    else:
        raise AssertionError("the fourth request in a minute was admitted")
    assert refusal.status_code == 429
    assert refusal.code == "rate_limit_exceeded"
    assert "requests per minute on key answers" in refusal.message
    headers = refusal.response.headers
    # the bucket gains one request every 20 s
    assert 1 <= int(headers["retry-after"]) <= 20
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert re.fullmatch(r"[0-9.hms]+", headers["x-ratelimit-reset-requests"])


def test_request_larger_than_the_bucket_is_told_it_can_never_fit(
    replicas: list[GatewayProcess], upstream: OpenAIFake
) -> None:
    before = len(upstream.requests)
    # the SDK would retry a 429 twice; the gateway tells it not to
    client = openai.OpenAI(base_url=replicas[1].base_url, api_key=GIANT_KEY, max_retries=2)
    try:
        client.chat.completions.create(
            model="chat-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2000
        )
    except openai.RateLimitError as error:
        refusal = error
    else:
        raise AssertionError("a request larger than the bucket was admitted")
    assert refusal.code == "rate_limit_exceeded"
    assert "can never fit" in refusal.message
    assert "key giant" in refusal.message
    assert refusal.response.headers["x-should-retry"] == "false"
    assert "retry-after" not in refusal.response.headers
    assert len(upstream.requests) == before


def test_cancelled_streams_give_their_concurrency_slots_back(
    replicas: list[GatewayProcess], upstream: OpenAIFake, shared_redis: RedisServer
) -> None:
    lease_key = redis_keys.lease_key(
        redis_keys.tenant_prefix("gw", "streams"), redis_keys.scope_path("key", "streams")
    )
    store = redis.Redis.from_url(shared_redis.url)
    disconnects_before = upstream.disconnects

    async def run() -> tuple[list[int], str, list[Answer]]:
        clients = [async_client(g, STREAMS_KEY) for g in replicas]
        seen: list[int] = []
        over_limit = ""
        for wave in range(10):
            upstream.enqueue(
                *(Reply(words=[f"w{i}" for i in range(300)], chunk_delay=0.02) for _ in range(10))
            )
            streams = [
                await clients[i % 3].chat.completions.create(
                    model="chat-model", messages=[{"role": "user", "content": "go"}], stream=True
                )
                for i in range(MAX_CONCURRENT)
            ]
            if wave == 0:
                # the cap is real: an eleventh stream while ten are open is refused
                over_limit = await refusal_message(clients[0])
            for stream in streams:
                count = 0
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        count += 1
                        if count == 3:
                            break
                await stream.close()
                seen.append(count)
            released = await asyncio.to_thread(wait_for, lambda: store.zcard(lease_key) == 0, 5)
            assert released, f"wave {wave}: {store.zcard(lease_key)} slots still held"
        final = await spread(clients, MAX_CONCURRENT, "chat-model")
        await close_all(clients)
        return seen, over_limit, final

    try:
        seen, over_limit, final = asyncio.run(run())
    finally:
        forget_script(upstream)
    assert seen == [3] * 100
    assert "at most 10 may be in flight" in over_limit
    assert [a.status for a in final] == [200] * MAX_CONCURRENT
    # each of the hundred streams was cut mid-way upstream too
    assert wait_for(lambda: upstream.disconnects - disconnects_before >= 100, 5)
    assert store.zcard(lease_key) == 0
    store.close()


def test_streams_that_repeat_a_client_request_id_each_hold_a_concurrency_slot(
    replicas: list[GatewayProcess], upstream: OpenAIFake, shared_redis: RedisServer
) -> None:
    """A client may send one tracing id with every request: each request still takes a
    slot of its own, so the cap holds, and each gives its own back."""
    lease_key = redis_keys.lease_key(
        redis_keys.tenant_prefix("gw", "streams"), redis_keys.scope_path("key", "streams")
    )
    store = redis.Redis.from_url(shared_redis.url)
    traced = {"x-request-id": "trace-session-e2e"}

    async def run() -> tuple[int, str, list[str]]:
        clients = [
            async_client(g, STREAMS_KEY).with_options(default_headers=traced) for g in replicas
        ]
        upstream.enqueue(
            *(Reply(words=[f"w{i}" for i in range(300)], chunk_delay=0.02) for _ in range(10))
        )
        streams = [
            await clients[i % 3].chat.completions.create(
                model="chat-model", messages=[{"role": "user", "content": "go"}], stream=True
            )
            for i in range(MAX_CONCURRENT)
        ]
        held = store.zcard(lease_key)
        over_limit = await refusal_message(clients[1])
        echoed = []
        for stream in streams:
            echoed.append(stream.response.headers["x-request-id"])
            await stream.close()
        await close_all(clients)
        return held, over_limit, echoed

    try:
        held, over_limit, echoed = asyncio.run(run())
    finally:
        forget_script(upstream)
    assert held == MAX_CONCURRENT
    assert "at most 10 may be in flight" in over_limit
    assert echoed == ["trace-session-e2e"] * MAX_CONCURRENT
    assert wait_for(lambda: store.zcard(lease_key) == 0, 5)
    store.close()
