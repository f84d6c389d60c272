"""The prompt is counted only where a decision depends on the count: planning a route,
a rule or a budget downgrade, a prompt whose cheap bound might not fit a context window,
and admitting a request whose key takes tokens or reserves money. Elsewhere the request is
served without a count, and its ledger record is the same."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway import tokens
from gateway.pipeline.policy_view import PolicyView
from gateway.pipeline.prompt_size import planning_needs_count
from gateway.settings.policy import Policy
from gateway.tokens import count_prompt, prompt_upper_bound
from gateway.wire.openai import ChatRequest
from tests.fakes.openai_server import OpenAIFake, Reply, completion
from tests.pipeline.support import call, one_model_policy, running, settled, write_config


@pytest.fixture(scope="module")
def fake() -> Any:
    with OpenAIFake() as server:
        yield server


def _body(model: str = "m", max_tokens: int | None = None, words: int = 40) -> dict[str, Any]:
    text = f"{uuid.uuid4().hex} " + " ".join(f"word{n}" for n in range(words))
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def _view(**extra: Any) -> PolicyView:
    policy: dict[str, Any] = {
        "models": {
            "m": {
                "deployments": [{"provider": "fake", "upstream_model": "up"}],
                "prices": {"input": 1.0, "output": 2.0},
                "context_window": 1000,
            }
        },
        "routes": {"r": {"strategy": "cheapest", "models": ["m"]}},
    }
    policy.update(extra)
    return PolicyView.build(Policy.model_validate(policy))


def _needs(view: PolicyView, body: dict[str, Any], headers: dict[str, str] | None = None) -> bool:
    request = msgspec.convert(body, ChatRequest)
    return planning_needs_count(view, request, headers or {}, prompt_upper_bound(request))


def test_planning_needs_the_count_only_where_it_could_change_the_plan() -> None:
    plain = _view()
    assert not _needs(plain, _body())
    assert _needs(plain, _body(model="r"))  # a route ranks by expected cost
    assert _needs(plain, _body(), {"x-gateway-route": "r"})
    # the bound plus the output could pass the smallest window: count to know
    assert not _needs(plain, _body(max_tokens=100))
    assert _needs(plain, _body(max_tokens=990))
    assert _needs(plain, _body(words=200))
    ruled = _view(
        rules=[{"name": "big", "when": {"prompt_tokens_above": 500}, "then": {"min_quality": 0.5}}]
    )
    assert _needs(ruled, _body())
    downgrading = _view(
        tenants={
            "t": {
                "budgets": [{"usd": 10, "downgrade_fraction": 0.8, "downgrade_route": "r"}],
                "keys": [],
            }
        }
    )
    assert _needs(downgrading, _body())


def _misses() -> int:
    return tokens._count_cached.cache_info().misses


def test_an_unlimited_key_on_a_model_is_served_without_counting(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            before = _misses()
            client = await call(rt, _body())
            assert client.status == 200
            await settled(rt)
            assert _misses() == before  # no BPE ran for this request
            assert rt.stores.memory_ledger is not None
            record = list(rt.stores.memory_ledger.records)[-1]
            # the provider's usage, as always (the fake counts words, plus 5)
            assert record.input_tokens == 41 + 5 and not record.estimated

    asyncio.run(scenario())


def test_a_key_that_takes_tokens_reserves_the_exact_count(tmp_path: Path, fake: OpenAIFake) -> None:
    policy = one_model_policy(limits={"tokens_per_minute": 100_000})
    body = _body(max_tokens=10)
    exact = count_prompt(msgspec.convert(body, ChatRequest))

    async def scenario() -> str:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            client = await call(rt, body)
            assert client.status == 200
            return client.headers["x-ratelimit-remaining-tokens"]

    assert int(asyncio.run(scenario())) == 100_000 - (exact + 10)
    assert prompt_upper_bound(msgspec.convert(body, ChatRequest)) > exact  # (it could differ)


def test_a_reply_without_usage_is_billed_on_the_exact_count(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    body = _body()
    exact = count_prompt(msgspec.convert(body, ChatRequest))
    answer = completion("up", "four words of answer", 1, 4)
    del answer["usage"]
    fake.enqueue(Reply(body=answer))

    async def scenario() -> Any:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            client = await call(rt, body)
            assert client.status == 200
            await settled(rt)
            assert rt.stores.memory_ledger is not None
            return list(rt.stores.memory_ledger.records)[-1]

    record = asyncio.run(scenario())
    assert record.input_tokens == exact
    assert record.estimated
