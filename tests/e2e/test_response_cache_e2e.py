"""The response cache through a real `gateway serve` on a real Redis, in front of the
fake OpenAI upstream (which records every call it gets), judged by the official `openai`
and `anthropic` SDKs: a repeat is answered without the upstream, identical, at cost 0,
recorded in the ledger as a hit with its saving; streams replay as streams; tenants
never share; TTL, size cap and the client's cache headers hold; every ingress API."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.metering.ledger_record import LedgerRecord
from tests.e2e.support import ledger_records, server_config, store_config, wait_for
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash
from tests.support.redis_server import RedisServer

ACME_KEY = "gw-cache-acme"
ACME_KEYED = "gw-cache-acme-keyed"
ACME_OPTED_OUT = "gw-cache-acme-out"
GLOBEX_KEY = "gw-cache-globex"
LIMITED_KEY = "gw-cache-limited"
# $1,000 / $2,000 per million tokens: every answer costs a visible amount
PRICES = {"input": 1000, "output": 2000}


def cache_policy() -> dict[str, Any]:
    chat = {"deployments": [{"provider": "fake", "upstream_model": "upstream-chat"}]}
    return {
        "models": {
            "chat-model": {**chat, "prices": PRICES},
            "embed-model": {
                "kind": "embedding",
                "deployments": [{"provider": "fake", "upstream_model": "upstream-embed"}],
                "prices": {"input": 100, "output": 0},
            },
        },
        "routes": {
            "cached": {"models": ["chat-model"], "cache": {"ttl_seconds": 600}},
            "short-lived": {"models": ["chat-model"], "cache": {"ttl_seconds": 1}},
            "small-entries": {"models": ["chat-model"], "cache": {"max_entry_bytes": 1024}},
            "uncached": {"models": ["chat-model"]},
            "cached-embed": {"models": ["embed-model"], "cache": {}},
        },
        "tenants": {
            "acme": {
                "keys": [
                    {"id": "acme", "hash": key_hash(ACME_KEY)},
                    # caches on every route, its own uncached ones too
                    {"id": "keyed", "hash": key_hash(ACME_KEYED), "cache": {"ttl_seconds": 60}},
                    {"id": "out", "hash": key_hash(ACME_OPTED_OUT), "cache": {"enabled": False}},
                ]
            },
            "globex": {"keys": [{"id": "globex", "hash": key_hash(GLOBEX_KEY)}]},
            "limited": {
                "keys": [
                    {
                        "id": "limited",
                        "hash": key_hash(LIMITED_KEY),
                        "limits": {"requests_per_minute": 2},
                        "cache": {},
                    }
                ]
            },
        },
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake() as server:
        yield server


@pytest.fixture(scope="module")
def redis_for_cache() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(fake: OpenAIFake, redis_for_cache: RedisServer) -> Iterator[GatewayProcess]:
    store = store_config(redis_for_cache.url, timeout_ms=2000, on_failure="fail_open")
    with GatewayProcess(server_config(fake.base_url, store), cache_policy()) as process:
        yield process


def client(gateway: GatewayProcess, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


def fresh(text: str = "question") -> str:
    """A prompt no other test sends, so upstream calls can be counted per test."""
    return f"{text} {uuid.uuid4().hex}"


def upstream_calls(fake: OpenAIFake, marker: str) -> int:
    return sum(1 for received in list(fake.requests) if marker in str(received.body))


def ask(
    gateway: GatewayProcess, prompt: str, *, model: str = "cached", key: str = ACME_KEY, **kw: Any
) -> tuple[str, dict[str, str]]:
    raw = client(gateway, key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], **kw
    )
    completion = raw.parse()
    return completion.choices[0].message.content or "", dict(raw.headers)


def ledger_record(redis: RedisServer, request_id: str) -> LedgerRecord:
    found: list[LedgerRecord] = []

    def written() -> bool:
        found[:] = [r for r in ledger_records(redis.url) if r.request_id == request_id]
        return bool(found)

    assert wait_for(written), f"no ledger record for {request_id}"
    return found[0]


def test_a_repeat_is_answered_from_the_cache_at_cost_zero_with_its_saving_in_the_ledger(
    gateway: GatewayProcess, fake: OpenAIFake, redis_for_cache: RedisServer
) -> None:
    prompt = fresh()
    # the first answer is scripted: an upstream call for the repeat would echo instead
    fake.enqueue(Reply(words=["scripted", "first", "answer"]))
    first, first_headers = ask(gateway, prompt)
    second, second_headers = ask(gateway, prompt)

    assert upstream_calls(fake, prompt) == 1
    assert first == second == "scripted first answer"
    assert first_headers["x-gateway-cache"] == "miss"
    assert second_headers["x-gateway-cache"] == "hit"
    assert Decimal(first_headers["x-gateway-cost-usd"]) > 0
    assert Decimal(second_headers["x-gateway-cost-usd"]) == 0
    assert second_headers["x-gateway-model"] == "chat-model"
    assert int(second_headers["age"]) >= 0

    miss = ledger_record(redis_for_cache, first_headers["x-request-id"])
    hit = ledger_record(redis_for_cache, second_headers["x-request-id"])
    assert (miss.cache, miss.saved_usd) == ("miss", "")
    assert miss.cost > 0 and miss.output_tokens == 3
    assert hit.cache == "hit"
    assert hit.cost == 0
    assert Decimal(hit.saved_usd) == miss.cost
    assert (hit.input_tokens, hit.output_tokens) == (0, 0)
    assert hit.model == miss.model == "chat-model"

    def access_line(request_id: str) -> str:
        lines = [line for line in gateway.log().splitlines() if request_id in line]
        return lines[-1] if lines else ""

    assert wait_for(lambda: bool(access_line(hit.request_id)))
    assert '"cache":"hit"' in access_line(hit.request_id)
    assert '"cache":"miss"' in access_line(miss.request_id)


def test_a_stream_is_replayed_as_a_stream_the_sdk_parses(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    prompt = fresh("stream me")
    sdk = client(gateway)

    def streamed(**options: Any) -> tuple[str, Any, dict[str, str]]:
        raw = sdk.chat.completions.with_raw_response.create(
            model="cached",
            messages=[{"role": "user", "content": prompt}],
            stream=True,
            **options,
        )
        text, usage = "", None
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            usage = chunk.usage or usage
        return text, usage, dict(raw.headers)

    first, first_usage, first_headers = streamed(stream_options={"include_usage": True})
    second, second_usage, second_headers = streamed(stream_options={"include_usage": True})
    # the usage chunk comes or not as the request asking now wants it
    third, third_usage, third_headers = streamed()

    assert upstream_calls(fake, prompt) == 1
    assert first == second == third
    assert first.startswith("echo: stream me")
    assert (first_headers["x-gateway-cache"], second_headers["x-gateway-cache"]) == ("miss", "hit")
    assert third_headers["x-gateway-cache"] == "hit"
    assert (
        second_usage is not None and second_usage.completion_tokens == first_usage.completion_tokens
    )
    assert third_usage is None
    # a whole answer is another entry: never a stream's replay
    whole, headers = ask(gateway, prompt)
    assert headers["x-gateway-cache"] == "miss" and whole == first
    assert upstream_calls(fake, prompt) == 2


def test_a_replayed_stream_ends_with_done_and_costs_zero(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    prompt = fresh("raw stream")
    body = {
        "model": "cached",
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    auth = {"authorization": f"Bearer {ACME_KEY}"}
    first = httpx.post(gateway.base_url + "/chat/completions", json=body, headers=auth)
    second = httpx.post(gateway.base_url + "/chat/completions", json=body, headers=auth)
    assert second.headers["x-gateway-cache"] == "hit"
    assert second.text.endswith("data: [DONE]\n\n")
    assert '"cost_usd":"0"' in second.text
    assert '"cost_usd":"0"' not in first.text
    # the same frames but the usage chunk's cost
    assert first.text.count("data: ") == second.text.count("data: ")
    assert upstream_calls(fake, prompt) == 1


def test_tenants_never_share_an_entry(gateway: GatewayProcess, fake: OpenAIFake) -> None:
    prompt = fresh("shared secret")
    _, acme_first = ask(gateway, prompt)
    _, globex_first = ask(gateway, prompt, key=GLOBEX_KEY)
    _, globex_second = ask(gateway, prompt, key=GLOBEX_KEY)
    assert acme_first["x-gateway-cache"] == "miss"
    assert globex_first["x-gateway-cache"] == "miss"
    assert globex_second["x-gateway-cache"] == "hit"
    assert upstream_calls(fake, prompt) == 2


def test_an_entry_expires_after_its_routes_ttl(gateway: GatewayProcess, fake: OpenAIFake) -> None:
    prompt = fresh("short lived")
    ask(gateway, prompt, model="short-lived")
    _, soon = ask(gateway, prompt, model="short-lived")
    time.sleep(1.5)
    _, later = ask(gateway, prompt, model="short-lived")
    assert soon["x-gateway-cache"] == "hit"
    assert later["x-gateway-cache"] == "miss"
    assert upstream_calls(fake, prompt) == 2


def test_an_answer_over_the_size_cap_is_served_but_not_cached(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    large = fresh("large " + "word " * 400)
    small = fresh("small")
    for prompt in (large, large, small, small):
        text, _ = ask(gateway, prompt, model="small-entries")
        assert text.startswith("echo:")
    assert upstream_calls(fake, large) == 2
    assert upstream_calls(fake, small) == 1


def test_the_clients_cache_headers_are_honoured(gateway: GatewayProcess, fake: OpenAIFake) -> None:
    prompt = fresh("headers")
    _, bypassed = ask(gateway, prompt, extra_headers={"x-gateway-cache": "bypass"})
    _, first = ask(gateway, prompt)  # the bypass stored nothing
    _, refreshed = ask(gateway, prompt, extra_headers={"cache-control": "no-cache"})
    _, hit = ask(gateway, prompt)
    assert bypassed["x-gateway-cache"] == "bypass"
    assert first["x-gateway-cache"] == "miss"
    assert refreshed["x-gateway-cache"] == "miss"
    assert hit["x-gateway-cache"] == "hit"
    assert upstream_calls(fake, prompt) == 3

    unstored = fresh("no store")
    _, once = ask(gateway, unstored, extra_headers={"cache-control": "no-store"})
    _, again = ask(gateway, unstored)
    assert (once["x-gateway-cache"], again["x-gateway-cache"]) == ("miss", "miss")
    assert upstream_calls(fake, unstored) == 2


def test_a_key_opts_in_on_any_route_or_out_of_a_caching_one(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    prompt = fresh("opt")
    _, plain = ask(gateway, prompt, model="uncached")
    assert "x-gateway-cache" not in plain
    ask(gateway, prompt, model="uncached", key=ACME_KEYED)
    _, keyed = ask(gateway, prompt, model="uncached", key=ACME_KEYED)
    assert keyed["x-gateway-cache"] == "hit"
    # a concrete model, no route at all: the key's block applies
    ask(gateway, prompt, model="chat-model", key=ACME_KEYED)
    _, concrete = ask(gateway, prompt, model="chat-model", key=ACME_KEYED)
    assert concrete["x-gateway-cache"] == "hit"
    for _ in range(2):
        _, out = ask(gateway, prompt, key=ACME_OPTED_OUT)
        assert "x-gateway-cache" not in out
    assert upstream_calls(fake, prompt) == 5


def test_hits_take_nothing_from_the_rate_limit(gateway: GatewayProcess, fake: OpenAIFake) -> None:
    """The key may make 2 upstream requests a minute; repeats are served from the cache."""
    prompt = fresh("limited")
    answers = [ask(gateway, prompt, key=LIMITED_KEY)[1]["x-gateway-cache"] for _ in range(5)]
    assert answers == ["miss", "hit", "hit", "hit", "hit"]
    ask(gateway, fresh("second upstream request"), key=LIMITED_KEY)
    with pytest.raises(openai.RateLimitError):
        ask(gateway, fresh("third upstream request"), key=LIMITED_KEY)
    assert upstream_calls(fake, prompt) == 1


def test_every_ingress_api_is_cached_in_its_own_shape(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    sdk = client(gateway)
    marker = fresh("every api")

    completions = [
        sdk.completions.with_raw_response.create(model="cached", prompt=marker, max_tokens=20)
        for _ in range(2)
    ]
    assert [c.headers["x-gateway-cache"] for c in completions] == ["miss", "hit"]
    assert completions[0].parse().choices[0].text == completions[1].parse().choices[0].text

    responses = [
        sdk.responses.with_raw_response.create(model="cached", input=marker + " responses")
        for _ in range(2)
    ]
    assert [r.headers["x-gateway-cache"] for r in responses] == ["miss", "hit"]
    first, second = (r.parse() for r in responses)
    assert first.output_text == second.output_text and first.id != second.id
    # the hit was stored as a response of its own: it can be continued
    assert sdk.responses.retrieve(second.id).output_text == second.output_text

    embeddings = [
        sdk.embeddings.with_raw_response.create(model="cached-embed", input=marker + " embed")
        for _ in range(2)
    ]
    assert [e.headers["x-gateway-cache"] for e in embeddings] == ["miss", "hit"]
    assert embeddings[0].parse().data[0].embedding == embeddings[1].parse().data[0].embedding

    claude = anthropic.Anthropic(base_url=gateway.url, api_key=ACME_KEY, max_retries=0)
    messages = [
        claude.messages.with_raw_response.create(
            model="cached",
            max_tokens=50,
            messages=[{"role": "user", "content": marker + " messages"}],
        )
        for _ in range(2)
    ]
    assert [m.headers["x-gateway-cache"] for m in messages] == ["miss", "hit"]
    one, two = (m.parse() for m in messages)
    assert one.content[0].text == two.content[0].text  # type: ignore[union-attr]
    assert one.id != two.id
    with claude.messages.stream(
        model="cached", max_tokens=50, messages=[{"role": "user", "content": marker + " messages"}]
    ) as stream:
        streamed = stream.get_final_message()
    # an Anthropic stream is its own entry (a miss), then replayed as Anthropic events
    with claude.messages.stream(
        model="cached", max_tokens=50, messages=[{"role": "user", "content": marker + " messages"}]
    ) as stream:
        replayed = stream.get_final_message()
        assert stream.response.headers["x-gateway-cache"] == "hit"
    assert streamed.content[0].text == replayed.content[0].text == one.content[0].text  # type: ignore[union-attr]

    # one upstream call per API and form: completions, responses, embeddings, messages
    # whole and streamed; the same text through chat completions is another entry again
    assert upstream_calls(fake, marker) == 5
    assert ask(gateway, marker)[1]["x-gateway-cache"] == "miss"


def test_the_metrics_count_hits_misses_bytes_and_savings(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    prompt = fresh("metered")
    ask(gateway, prompt)
    ask(gateway, prompt)
    text = httpx.get(gateway.url + "/metrics", timeout=5).text

    def value(name: str, *labels: str) -> float:
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(label in line for label in labels):
                total += float(line.rsplit(" ", 1)[1])
        return total

    assert value("gateway_cache_lookups_total", 'result="hit"', 'route="cached"') >= 1
    assert value("gateway_cache_lookups_total", 'result="miss"', 'route="cached"') >= 1
    assert value("gateway_cache_writes_total", 'result="stored"') >= 1
    assert value("gateway_cache_bytes_total", 'direction="read"') > 0
    assert value("gateway_cache_bytes_total", 'direction="written"') > 0
    assert value("gateway_cache_saved_usd_total", 'model="chat-model"') > 0


def test_a_cache_without_redis_fails_open_and_says_so(fake: OpenAIFake) -> None:
    redis = RedisServer()
    redis.start()
    store = store_config(redis.url, timeout_ms=200, on_failure="fail_open")
    try:
        with GatewayProcess(server_config(fake.base_url, store), cache_policy()) as gateway:
            prompt = fresh("redis down")
            ask(gateway, prompt)
            assert ask(gateway, prompt)[1]["x-gateway-cache"] == "hit"
            redis.stop()
            for _ in range(2):
                text, headers = ask(gateway, prompt)
                assert text.startswith("echo: redis down")
                assert headers["x-gateway-cache"] == "miss; store unavailable"
            assert upstream_calls(fake, prompt) == 3
            metrics = httpx.get(gateway.url + "/metrics", timeout=5).text
            assert 'gateway_cache_lookups_total{result="error",route="cached"}' in metrics
            redis.start()

            def cached_again() -> bool:
                return ask(gateway, prompt)[1]["x-gateway-cache"] in ("miss", "hit")

            assert wait_for(cached_again, timeout=15, step=0.3)
            ask(gateway, prompt)
            assert ask(gateway, prompt)[1]["x-gateway-cache"] == "hit"
    finally:
        redis.stop()


def test_the_in_memory_store_caches_too(fake: OpenAIFake) -> None:
    config = server_config(fake.base_url, {"kind": "memory"})
    with GatewayProcess(config, cache_policy()) as gateway:
        prompt = fresh("in memory")
        first, _ = ask(gateway, prompt)
        second, headers = ask(gateway, prompt)
        assert headers["x-gateway-cache"] == "hit" and first == second
        assert upstream_calls(fake, prompt) == 1
