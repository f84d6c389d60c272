"""Admission reserves a prompt's UTF-8 length, a bound no token count exceeds, instead of
counting it, while the key's limits are far off (pipeline/admit.py): the count's BPE is
skipped where it could not change the decision. Near the limits it counts, and a bound
refused for tokens is decided again on the count, so it refuses nothing a count admits.

The prompt is 33,000 words of "hello": 33,000 tokens counted, ~198,000 by the bound."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.pipeline import admit
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.pipeline.support import KEY, call, running, settled, write_config
from tests.support.gateway_process import key_hash

OTHER_KEY = "gw-other-key-0123456789abcdef"
LONG = {
    "model": "m",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hello " * 33_000}],
}
COUNTED = 33_000
BOUND = len(LONG["messages"][0]["content"])  # type: ignore[index]


@pytest.fixture
def fake() -> Any:
    # one per test: a test that fails with scripted replies left would shift the next's
    with OpenAIFake() as server:
        yield server


def policy(
    tenant_limits: dict[str, Any] | None,
    key_limits: dict[str, Any] | None,
    tenant_budget_usd: float | None = None,
) -> Any:
    limited = {"limits": key_limits} if key_limits else {}
    budgets = {"budgets": [{"usd": tenant_budget_usd}]} if tenant_budget_usd else {}
    return {
        "models": {
            "m": {
                "deployments": [{"provider": "fake", "upstream_model": "up"}],
                "prices": {"input": 1.0, "output": 2.0},
                # room for the other key's huge max_tokens, and no count for planning
                "context_window": 8_000_000,
                "max_output_tokens": 8_000_000,
            }
        },
        "tenants": {
            "t": {
                **({"limits": tenant_limits} if tenant_limits else {}),
                **budgets,
                "keys": [
                    {"id": "k", "hash": key_hash(KEY), **limited},
                    {"id": "other", "hash": key_hash(OTHER_KEY)},
                ],
            }
        },
    }


def remaining_tokens(client: Any) -> int:
    return int(client.headers["x-ratelimit-remaining-tokens"])


async def reserved_by_another_key(
    rt: Any, fake: OpenAIFake, max_tokens: int, seconds: float
) -> asyncio.Future[Any]:
    """Another key of the tenant asks for `max_tokens` of output (reserved until it is
    answered, `seconds` later) and is admitted by the time this returns."""
    fake.enqueue(Reply(words=["ok"], delay=seconds))
    hog = {"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}]}
    holding = asyncio.ensure_future(call(rt, hog, key=OTHER_KEY))
    await asyncio.sleep(0.1)
    return holding


def test_far_from_its_limits_a_request_reserves_the_bound_near_them_the_count(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    async def scenario(capacity: int) -> list[int]:
        limits = {"tokens_per_minute": capacity}
        config = write_config(tmp_path, fake.base_url, policy(None, limits))
        async with running(config) as rt:
            taken = []
            for _ in range(2):
                fake.enqueue(Reply(words=["ok"]))
                answer = await call(rt, LONG)
                assert answer.status == 200
                taken.append(capacity - remaining_tokens(answer))
                await settled(rt)  # refunded, and refilled to capacity by the next
            return taken

    # the first request's key has no headroom seen yet: counted; the second is far off
    far = asyncio.run(scenario(10_000_000))
    assert COUNTED <= far[0] < COUNTED + 1_000
    assert BOUND <= far[1] < BOUND + 20_000
    # 16 of the bound's reservations do not fit in 2,000,000: counted both times (the
    # second finds the first's 33,000 only partly refilled)
    near = asyncio.run(scenario(2_000_000))
    assert COUNTED <= near[0] < COUNTED + 1_000
    assert COUNTED <= near[1] < 2 * COUNTED < BOUND


def test_a_bound_refused_for_tokens_is_decided_again_on_the_count(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    """The key saw 4,000,000 tokens of headroom a moment ago (room for 16 bounds); then
    another key of its tenant reserved all but ~130,000 of them: the bound no longer fits,
    the count does."""
    capacity = 4_000_000

    async def scenario() -> tuple[int, int, int]:
        config = write_config(
            tmp_path, fake.base_url, policy({"tokens_per_minute": capacity}, None)
        )
        async with running(config) as rt:
            fake.enqueue(Reply(words=["ok"]))
            first = await call(rt, LONG)
            await asyncio.sleep(0.5)  # settled, and refilled to capacity
            holding = await reserved_by_another_key(rt, fake, capacity - 130_000, 1.0)
            fake.enqueue(Reply(words=["ok"]))
            second = await call(rt, LONG)
            assert (await holding).status == 200
            return first.status, second.status, remaining_tokens(second)

    first, second, left = asyncio.run(scenario())
    assert first == 200
    assert second == 200, "a bound refused what the count admits"
    assert left < 130_000 + 20_000 - COUNTED


# prices: $1 a million input tokens, $2 output; 16 output tokens reserve $0.000032
COUNTED_USD = COUNTED / 1e6
BOUND_USD = BOUND / 1e6


def test_a_budget_far_off_reserves_the_bound_and_one_near_the_count(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    """The tenant's budget used at each admission (its reservation in it) tells which."""

    async def scenario(budget_usd: float) -> list[float]:
        config = write_config(tmp_path, fake.base_url, policy(None, None, budget_usd))
        async with running(config) as rt:
            used = []
            for _ in range(2):
                fake.enqueue(Reply(words=["ok"]))
                assert (await call(rt, LONG)).status == 200
                used.append(rt.budget_use.state_of("t").budget_used_fraction * budget_usd)
                await settled(rt)
            return used

    # $100 holds 16 bounds ($0.198 each): the second reserves the bound beside the first's
    # cost; $2 does not: both counted
    far = asyncio.run(scenario(100.0))
    assert far[1] - far[0] > BOUND_USD - 0.01
    near = asyncio.run(scenario(2.0))
    assert near[1] - near[0] < COUNTED_USD + 0.01 < BOUND_USD


def test_a_bound_refused_by_a_budget_is_decided_again_on_the_count(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    """$5 held 16 bounds a moment ago; then another key's worst case took all but ~$0.17
    of it: the bound ($0.198) no longer fits, the count ($0.033) does."""

    async def scenario() -> tuple[int, int]:
        config = write_config(tmp_path, fake.base_url, policy(None, None, 5.0))
        async with running(config) as rt:
            fake.enqueue(Reply(words=["ok"]))
            first = await call(rt, LONG)
            await settled(rt)
            # ~$4.80 of output at $2 a million
            holding = await reserved_by_another_key(rt, fake, 2_400_000, 1.0)
            fake.enqueue(Reply(words=["ok"]))
            second = await call(rt, LONG)
            assert (await holding).status == 200
            return first.status, second.status

    assert asyncio.run(scenario()) == (200, 200)


def test_a_refusal_forgets_the_headroom_and_the_next_request_counts(
    tmp_path: Path, fake: OpenAIFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The headroom seen stays fresh for the whole test (30 s): only the refusal in
    between can make the third request count rather than reserve the bound."""
    monkeypatch.setattr(admit, "HEADROOM_FRESH_SECONDS", 30.0)
    capacity = 4_000_000

    async def scenario() -> tuple[int, int, int]:
        config = write_config(
            tmp_path, fake.base_url, policy({"tokens_per_minute": capacity}, None)
        )
        async with running(config) as rt:
            fake.enqueue(Reply(words=["ok"]))
            assert (await call(rt, LONG)).status == 200  # counted: no headroom seen yet
            await asyncio.sleep(0.5)  # settled, and refilled to capacity
            holding = await reserved_by_another_key(rt, fake, capacity - 5_000, 1.0)
            refused = await call(rt, LONG)  # neither the bound nor the count fits
            assert (await holding).status == 200
            await settled(rt)  # the hog's reservation is handed back
            fake.enqueue(Reply(words=["ok"]))
            third = await call(rt, LONG)
            return refused.status, third.status, capacity - remaining_tokens(third)

    refused, third, taken = asyncio.run(scenario())
    assert refused == 429
    assert third == 200
    assert taken < 3 * COUNTED < BOUND, "the third request reserved the bound"
