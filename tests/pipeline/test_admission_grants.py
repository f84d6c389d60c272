"""Admission ahead (pipeline/admit.py, GRANT_SECONDS): on Redis, far from a key's limits,
a request's settlement asks for a grant, an admission made off the request path, and the
key's next request on that replica is served under it without a store round trip.

What each test reads is Redis itself: the concurrency cap's lease set names who holds a
slot (a request admitted on its own holds its own id, one served under a grant holds
the grant's), and the tenant budget's spend says what is reserved."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from gateway.pipeline import admit
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.observability.test_metrics import parse, value
from tests.pipeline.support import KEY, call, running, settled, write_config
from tests.support.gateway_process import key_hash
from tests.support.redis_server import RedisServer

HI = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi there"}]}
ROOMY = {"requests_per_minute": 100_000, "tokens_per_minute": 100_000_000, "max_concurrent": 100}


@pytest.fixture
def fake() -> Any:
    with OpenAIFake() as server:
        yield server


def config(
    folder: Path,
    fake: OpenAIFake,
    server: RedisServer,
    limits: dict[str, Any],
    budget_usd: float = 1_000.0,
    grants: bool = True,
    on_failure: str = "fail_open",
) -> Path:
    policy = {
        "models": {
            "m": {
                "deployments": [{"provider": "fake", "upstream_model": "up"}],
                "prices": {"input": 1.0, "output": 2.0},
            }
        },
        "tenants": {
            "t": {
                "budgets": [{"usd": budget_usd}],
                "keys": [{"id": "k", "hash": key_hash(KEY), "limits": limits}],
            }
        },
    }
    path = write_config(folder, fake.base_url, policy)
    settings = yaml.safe_load(path.read_text())
    settings["store"] = {
        "kind": "redis",
        "redis_url": server.url,
        "cluster": False,
        "admission_grants": grants,
        "on_failure": on_failure,
    }
    path.write_text(yaml.safe_dump(settings))
    return path


def slot_holders(server: RedisServer) -> list[str]:
    with redis.Redis.from_url(server.url) as client:
        keys = [k for k in client.scan_iter(match="*lease*") if client.type(k) == b"zset"]
        return sorted(m.decode() for key in keys for m in client.zrange(key, 0, -1))


def budget_spent(server: RedisServer) -> Decimal:
    with redis.Redis.from_url(server.url) as client:
        keys = list(client.scan_iter(match="*:budget:*"))
        assert len(keys) == 1
        return Decimal(int(client.hget(keys[0], "spent") or 0)) / 1_000_000


def cost(answer: Any) -> Decimal:
    return Decimal(answer.headers["x-gateway-cost-usd"])


def grant_counts(runtime: Any) -> dict[str, float]:
    """gateway_admission_grants_total by outcome, as Prometheus scrapes it."""
    samples = parse(runtime.metrics.render()[0].decode())
    return {
        outcome: value(samples, "gateway_admission_grants_total", outcome=outcome)
        for outcome in ("made", "used", "returned")
    }


def grants_held(server: RedisServer) -> list[str]:
    return [m for m in slot_holders(server) if m.startswith("grant-")]


async def upstream_received(fake: OpenAIFake, count: int) -> None:
    """Until the upstream has had `count` requests: the last is past its admission and
    in flight (its reply's delay counts from here). A sleep instead let a loaded machine
    send the test's next request first."""
    deadline = time.monotonic() + 10
    while len(fake.requests) < count:
        assert time.monotonic() < deadline, f"the upstream had {len(fake.requests)} of {count}"
        await asyncio.sleep(0.01)


def test_the_next_request_is_served_under_the_grant_its_predecessor_asked_for(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    async def scenario() -> None:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            first = await call(rt, HI)
            assert first.status == 200
            await settled(rt)
            # the first settled and asked ahead: one idle grant holds a slot
            ahead = grants_held(redis_db)
            assert len(ahead) == 1
            assert slot_holders(redis_db) == ahead
            fake.enqueue(Reply(words=["ok"], delay=0.5))
            second = asyncio.ensure_future(call(rt, HI))
            await upstream_received(fake, 2)
            await asyncio.sleep(0.15)  # (its reply comes 0.5 s after it came)
            # in flight under the grant (no admission of its own), and alone here, it has
            # asked for the next one already
            in_flight = slot_holders(redis_db)
            assert ahead[0] in in_flight and len(in_flight) == 2
            assert all(member.startswith("grant-") for member in in_flight)
            answer = await second
            assert answer.status == 200
            # the grant's admission answers for it
            assert "x-ratelimit-remaining-requests" in answer.headers
            await settled(rt)
            # its settlement asked for the next one
            after = grants_held(redis_db)
            assert len(after) == 1 and after != ahead

    asyncio.run(scenario())


def test_a_grant_holds_twice_what_its_request_needed_however_long_the_chain(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    """A request served under a grant asks for the next one by what it needed, not by
    what the grant it used held (which would double at every turn)."""

    async def scenario() -> tuple[list[Decimal], dict[str, float]]:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            spent, holds = Decimal(0), []
            for _ in range(4):
                answer = await call(rt, HI)
                assert answer.status == 200
                spent += cost(answer)
                await settled(rt)
                holds.append(budget_spent(redis_db) - spent)
            return holds, grant_counts(rt)

    holds, counts = asyncio.run(scenario())
    # the first admitted on its own; each asked for the next, the last one's is held
    assert counts == {"made": 4, "used": 3, "returned": 0}
    # the first request's prompt was counted (no headroom seen yet), the others' bound
    # (pipeline/prompt_size): a little more, and the same every turn after
    assert 0 < holds[0] <= holds[1] < 2 * holds[0]
    assert holds[1:] == [holds[1]] * 3


def test_a_grant_too_small_for_the_next_request_is_given_back_for_one_its_size(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    larger = {**HI, "messages": [{"role": "user", "content": "tell me more " * 400}]}

    async def scenario() -> tuple[list[str], list[str], Decimal, Decimal]:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            answers = [await call(rt, HI)]
            await settled(rt)
            small = grants_held(redis_db)
            hold_small = budget_spent(redis_db) - cost(answers[0])
            fake.enqueue(Reply(words=["ok"], delay=0.3))
            served = asyncio.ensure_future(call(rt, larger))
            await upstream_received(fake, 2)
            await asyncio.sleep(0.1)  # (its reply comes 0.3 s after it came)
            # admitted on its own; the small grant is already given back
            in_flight = slot_holders(redis_db)
            answers.append(await served)
            assert [a.status for a in answers] == [200, 200]
            await settled(rt)
            hold_large = budget_spent(redis_db) - sum(cost(a) for a in answers)
            return small, in_flight, hold_small, hold_large

    small, in_flight, hold_small, hold_large = asyncio.run(scenario())
    assert len(small) == 1 and small[0] not in in_flight  # given back
    # in flight on its own admission (and, alone, its grant for the next one asked)
    assert len([m for m in in_flight if not m.startswith("grant-")]) == 1
    assert hold_large > hold_small > 0  # the next grant is sized for the larger request


def test_a_key_whose_requests_outlast_half_a_grant_asks_only_when_they_settle(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked at admission, a grant would lapse before the next request of a slow key."""
    monkeypatch.setattr(admit, "GRANT_SECONDS", 0.6)

    async def scenario() -> tuple[list[str], list[str]]:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            fake.enqueue(Reply(words=["ok"], delay=0.4))
            assert (await call(rt, HI)).status == 200  # alone, unknown: asked at admission
            first = grants_held(redis_db)
            fake.enqueue(Reply(words=["ok"], delay=0.4))
            second = asyncio.ensure_future(call(rt, HI))
            await upstream_received(fake, 2)
            await asyncio.sleep(0.1)  # (its reply comes 0.4 s after it came)
            in_flight = slot_holders(redis_db)  # under the first's grant, nothing asked
            assert (await second).status == 200
            return first, in_flight

    first, in_flight = asyncio.run(scenario())
    assert len(first) == 1
    assert in_flight == first


def test_an_unused_grant_is_given_back_whole(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # long enough that a busy machine's slow first request neither counts as a slow key's
    # (over half of it) nor outlasts the grant before it is looked at
    monkeypatch.setattr(admit, "GRANT_SECONDS", 2.0)

    async def scenario() -> tuple[Decimal, Decimal, Decimal, list[str]]:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            answer = await call(rt, HI)
            assert answer.status == 200
            await settled(rt)
            while_held = budget_spent(redis_db)
            assert grants_held(redis_db)
            for _ in range(200):  # given back GRANT_SECONDS after it was made, within 10 s
                if grant_counts(rt)["returned"]:
                    break
                await asyncio.sleep(0.05)
            assert grant_counts(rt) == {"made": 1, "used": 0, "returned": 1}
            return cost(answer), while_held, budget_spent(redis_db), slot_holders(redis_db)

    spent, while_held, after, holders = asyncio.run(scenario())
    # held: the first request's cost and twice its worst case; given back: its cost alone
    assert while_held > spent > 0
    assert after == spent
    assert holders == []


def test_near_a_limit_nothing_is_admitted_ahead(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    """Eight concurrent requests at most: a grant would hold one slot of the eight, so
    none is asked for (it needs room for FAR_FROM_LIMITS requests in every limit)."""
    capped = {**ROOMY, "max_concurrent": 8}

    async def scenario() -> tuple[Decimal, Decimal, list[str]]:
        async with running(config(tmp_path, fake, redis_db, capped)) as rt:
            answers = [await call(rt, HI) for _ in range(3)]
            assert [a.status for a in answers] == [200] * 3
            await settled(rt)
            return sum(cost(a) for a in answers), budget_spent(redis_db), slot_holders(redis_db)

    spent, reserved, holders = asyncio.run(scenario())
    assert holders == []
    assert reserved == spent


def test_while_another_request_of_the_key_is_in_flight_nothing_is_asked_ahead(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            fake.enqueue(Reply(words=["ok"], delay=0.6))
            slow = asyncio.ensure_future(call(rt, HI))
            await upstream_received(fake, 1)
            fake.enqueue(Reply(words=["ok"]))
            assert (await call(rt, HI)).status == 200
            await settled(rt)
            # the fast one settled while the slow one is served: one slot, the slow one's
            while_slow = slot_holders(redis_db)
            assert (await slow).status == 200
            await settled(rt)
            return while_slow, grants_held(redis_db)

    while_slow, after = asyncio.run(scenario())
    assert len(while_slow) == 1 and not while_slow[0].startswith("grant-")
    assert len(after) == 1  # the last one out asked


def test_a_request_failing_after_its_admission_is_counted_out_once(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fails nothing and stays in flight; B fails after its admission (500) and is
    settled; C comes while A is still served: it is not alone, so it asks for nothing."""
    calls = {"n": 0}
    real_headers = admit.rate_limit_headers

    def headers_failing_once(admission: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("a failure after the admission")
        return real_headers(admission)

    monkeypatch.setattr(admit, "rate_limit_headers", headers_failing_once)

    async def scenario() -> list[str]:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            fake.enqueue(Reply(words=["ok"], delay=1.0))
            first = asyncio.ensure_future(call(rt, HI))
            await upstream_received(fake, 1)
            assert (await call(rt, HI)).status == 500
            await settled(rt)
            fake.enqueue(Reply(words=["ok"], delay=0.4))
            third = asyncio.ensure_future(call(rt, HI))
            await upstream_received(fake, 2)  # (the second failed before the upstream)
            holders = slot_holders(redis_db)  # the first's and the third's own
            assert [(await first).status, (await third).status] == [200, 200]
            return holders

    holders = asyncio.run(scenario())
    assert len(holders) == 2
    assert not any(member.startswith("grant-") for member in holders)


@pytest.mark.parametrize(
    "setting", [{"grants": False}, {"on_failure": "fail_closed"}], ids=["off", "fail_closed"]
)
def test_without_grants_every_request_waits_for_its_own_admission(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer, setting: dict[str, Any]
) -> None:
    async def scenario() -> list[str]:
        async with running(config(tmp_path, fake, redis_db, ROOMY, **setting)) as rt:
            for _ in range(2):
                assert (await call(rt, HI)).status == 200
                await settled(rt)
            return slot_holders(redis_db)

    assert asyncio.run(scenario()) == []


def test_shutdown_gives_the_grants_back(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    async def scenario() -> Decimal:
        async with running(config(tmp_path, fake, redis_db, ROOMY)) as rt:
            answers = [await call(rt, HI) for _ in range(3)]
            assert [a.status for a in answers] == [200] * 3
            await settled(rt)
            assert grants_held(redis_db)
        return sum(cost(a) for a in answers)

    spent = asyncio.run(scenario())
    assert slot_holders(redis_db) == []
    assert budget_spent(redis_db) == spent


def test_across_two_replicas_a_limit_admits_exactly_its_capacity(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    """Two replicas on one Redis take turns at a key allowed 40 requests a minute: grants
    are made while 16 or more are left and adopted by the next request, so none is
    refused while any is left, and none is served past the 40th."""
    limits = {**ROOMY, "requests_per_minute": 40}
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()

    async def scenario() -> tuple[list[int], int, Decimal, Decimal, list[str]]:
        async with (
            running(config(first_dir, fake, redis_db, limits)) as first,
            running(config(second_dir, fake, redis_db, limits)) as second,
        ):
            statuses, spent, most_ahead = [], Decimal(0), 0
            for turn in range(50):
                answer = await call((first, second)[turn % 2], HI)
                statuses.append(answer.status)
                if answer.status == 200:
                    spent += cost(answer)
                # its settlement and grant go out (one trip), not long enough to refill
                await asyncio.sleep(0.02)
                most_ahead = max(most_ahead, len(grants_held(redis_db)))
            grants_at_the_end = grants_held(redis_db)
            await settled(first)
            await settled(second)
        return statuses, most_ahead, spent, budget_spent(redis_db), grants_at_the_end

    statuses, most_ahead, spent, reserved, grants_at_the_end = asyncio.run(scenario())
    assert most_ahead == 2  # one for each replica, while far from the limit
    # 40, and what 40 a minute refills over the second or two this takes
    served = statuses.count(200)
    assert 40 <= served <= 41
    assert statuses[:40] == [200] * 40
    assert set(statuses) == {200, 429}
    assert grants_at_the_end == []  # near the limit, nothing is held ahead
    assert reserved == spent
