"""When a request's limits settlement goes to Redis (pipeline/admit.py): while other
requests the worker admitted are unsettled, it waits to share their trip; the last one
out is sent at once, taking any waiting along, so that one request at a time the next
admission does not find it ahead of it in its own trip.

The batcher's wait for company is made 30 s here: a settlement that went out within the
test's moment went out because nothing was left to carry it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from gateway.limits import script_batch
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.pipeline.support import call, one_model_policy, running, write_config
from tests.support.redis_server import RedisServer

HI = {"model": "m", "messages": [{"role": "user", "content": "hi there"}]}


@pytest.fixture(scope="module")
def fake() -> Any:
    with OpenAIFake() as server:
        yield server


@pytest.fixture(autouse=True)
def company_far_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(script_batch, "WAIT_FOR_COMPANY_SECONDS", 30.0)


def redis_config(folder: Path, fake: OpenAIFake, server: RedisServer, slots: int) -> Path:
    config = write_config(folder, fake.base_url, one_model_policy(limits={"max_concurrent": slots}))
    settings = yaml.safe_load(config.read_text())
    settings["store"] = {"kind": "redis", "redis_url": server.url, "cluster": False}
    config.write_text(yaml.safe_dump(settings))
    return config


def leases_held(server: RedisServer) -> int:
    with redis.Redis.from_url(server.url) as client:
        return sum(
            int(client.zcard(key))
            for key in client.scan_iter(match="*lease*")
            if client.type(key) == b"zset"
        )


def test_the_only_request_settles_at_once(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        async with running(redis_config(tmp_path, fake, redis_db, slots=2)) as rt:
            statuses, held = [], []
            for _ in range(2):
                statuses.append((await call(rt, HI)).status)
                await asyncio.sleep(0.3)
                held.append(leases_held(redis_db))
            return statuses, held

    statuses, held = asyncio.run(scenario())
    assert statuses == [200, 200]
    assert held == [0, 0]


def test_a_settlement_waits_while_others_are_served_and_the_last_takes_it_along(
    tmp_path: Path, fake: OpenAIFake, redis_db: RedisServer
) -> None:
    async def scenario() -> tuple[int, int]:
        async with running(redis_config(tmp_path, fake, redis_db, slots=5)) as rt:
            fake.enqueue(Reply(delay=0.8))
            slow = asyncio.ensure_future(call(rt, HI))
            await asyncio.sleep(0.2)
            assert (await call(rt, HI)).status == 200  # served while the slow one is
            await asyncio.sleep(0.3)
            while_slow_is_served = leases_held(redis_db)  # both: the fast one's waits
            assert (await slow).status == 200
            await asyncio.sleep(0.3)
            return while_slow_is_served, leases_held(redis_db)

    during, after = asyncio.run(scenario())
    assert during == 2
    assert after == 0
