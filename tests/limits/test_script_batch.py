"""Script calls of one loop turn share one pipeline, and each keeps its own answer."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from gateway.errors import StoreUnavailable
from gateway.limits import RedisLimitStore
from gateway.limits.redis_limit_store import _Script, redis_client
from gateway.limits.script_batch import ScriptBatcher
from tests.limits.builders import admission, requests_bucket
from tests.support.redis_server import RedisServer

TIMEOUT = 2.0


def _connected_clients(server: RedisServer) -> int:
    info = redis.Redis.from_url(server.url).info("clients")
    return int(info["connected_clients"])


def test_a_burst_of_admissions_shares_one_connection_and_counts_exactly(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> list[bool]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            bucket = requests_bucket(name="burst", capacity=150)
            answers = await asyncio.gather(
                *(store.admit(admission(buckets=(bucket,))) for _ in range(200))
            )
            return [a.allowed for a in answers]
        finally:
            await store.close()

    allowed = asyncio.run(scenario())
    assert allowed.count(True) == 150
    assert allowed[:150] == [True] * 150  # the pipeline keeps the callers' order


def test_the_burst_uses_a_single_pooled_connection(fresh_redis: RedisServer) -> None:
    async def scenario() -> int:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            bucket = requests_bucket(name="conn", capacity=1000)
            await asyncio.gather(*(store.admit(admission(buckets=(bucket,))) for _ in range(200)))
            # one call at a time would have opened dozens of pooled connections; the
            # count includes this test's own probe
            return _connected_clients(fresh_redis)
        finally:
            await store.close()

    assert asyncio.run(scenario()) <= 3


def test_the_batchers_connection_speaks_resp2_whatever_the_clients_default(
    fresh_redis: RedisServer,
) -> None:
    """The reader hands replies straight off hiredis only on RESP2; redis-py 8 opens RESP3
    connections by default, which sent every reply through redis-py's coroutines."""

    async def scenario() -> tuple[int, list[str]]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            bucket = requests_bucket(name="resp", capacity=10)
            answers = await asyncio.gather(
                *(store.admit(admission(buckets=(bucket,))) for _ in range(12))
            )
            client = redis_client(fresh_redis.url, timeout_seconds=TIMEOUT)
            assert isinstance(client, AsyncRedis)
            default = client.connection_pool.connection_class(
                **client.connection_pool.connection_kwargs
            ).protocol
            await client.aclose()
            listed = redis.Redis.from_url(fresh_redis.url, protocol=2).client_list()
            assert [a.allowed for a in answers] == [True] * 10 + [False] * 2
            return int(default), [c["resp"] for c in listed if c["cmd"] == "evalsha"]
        finally:
            await store.close()

    default, script_connections = asyncio.run(scenario())
    assert default == 3  # the client's own default, which the batcher does not take
    assert script_connections == ["2"]


def test_scripts_flushed_from_redis_are_loaded_again_for_the_whole_batch(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> list[bool]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            redis.Redis.from_url(fresh_redis.url).script_flush()
            bucket = requests_bucket(name="flushed", capacity=100)
            answers = await asyncio.gather(
                *(store.admit(admission(buckets=(bucket,))) for _ in range(40))
            )
            return [a.allowed for a in answers]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [True] * 40


def test_a_failing_call_fails_alone(fresh_redis: RedisServer) -> None:
    async def scenario() -> list[object]:
        client = redis_client(fresh_redis.url, timeout_seconds=TIMEOUT)
        batcher = ScriptBatcher(client, timeout_seconds=TIMEOUT)
        script = _Script("renew")
        try:
            calls = [
                batcher.run(script, ["gw:{t}:lease:a"], [b'{"m":["r1"],"t":[1000]}']),
                batcher.run(script, ["gw:{t}:lease:a"], [b"not json"]),
                batcher.run(script, ["gw:{t}:lease:b"], [b'{"m":["r2"],"t":[1000]}']),
            ]
            return list(await asyncio.gather(*calls, return_exceptions=True))
        finally:
            await batcher.close()
            await client.aclose()

    first, broken, third = asyncio.run(scenario())
    assert first == 0 and third == 0  # no such lease held: renewed none
    assert isinstance(broken, ResponseError)


def test_a_dead_redis_fails_every_call_of_the_batch_within_the_deadline(
    fresh_redis: RedisServer,
) -> None:
    async def scenario() -> list[object]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=0.3, cluster=False)
        fresh_redis.stop(kill=True)
        try:
            bucket = requests_bucket(name="dead", capacity=100)
            async with asyncio.timeout(2):
                return list(
                    await asyncio.gather(
                        *(store.admit(admission(buckets=(bucket,))) for _ in range(20)),
                        return_exceptions=True,
                    )
                )
        finally:
            await store.close()

    answers = asyncio.run(scenario())
    assert len(answers) == 20
    assert all(isinstance(a, StoreUnavailable) for a in answers)


@pytest.mark.parametrize("callers", [1, 3])
def test_callers_who_give_up_do_not_break_the_others(
    fresh_redis: RedisServer, callers: int
) -> None:
    async def scenario() -> list[bool]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=TIMEOUT, cluster=False)
        try:
            bucket = requests_bucket(name="giveup", capacity=100)
            quitters = [
                asyncio.ensure_future(store.admit(admission(buckets=(bucket,))))
                for _ in range(callers)
            ]
            stayers = [
                asyncio.ensure_future(store.admit(admission(buckets=(bucket,)))) for _ in range(5)
            ]
            await asyncio.sleep(0)
            for task in quitters:
                task.cancel()
            answers = await asyncio.gather(*stayers)
            return [a.allowed for a in answers]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [True] * 5


def test_commands_are_packed_byte_for_byte_as_redis_py_packs_them() -> None:
    from redis.asyncio.connection import Connection

    from gateway.redis_resp import pack_commands

    commands = [
        ("EVALSHA", "a" * 40, 3, "gw:{t:x}:rl", "gw:{t:é}:lease", "k", b'{"id":"r1","b":[]}'),
        ("SCRIPT", "LOAD", "return redis.call('TIME')"),
        ("EVALSHA", "b" * 40, 0, b""),
    ]
    assert pack_commands(commands) == b"".join(Connection().pack_commands(commands))


def test_replies_are_parsed_by_hiredis() -> None:
    """The gateway depends on hiredis so that redis-py parses every reply in C; without it
    redis-py silently falls back to its pure-Python parser."""
    from redis.asyncio.connection import DefaultParser
    from redis.utils import HIREDIS_AVAILABLE

    assert HIREDIS_AVAILABLE
    assert "Hiredis" in DefaultParser.__name__


def test_a_stuck_redis_fails_each_call_at_its_own_deadline_not_an_earlier_batchs(
    fresh_redis: RedisServer,
) -> None:
    """One watchdog timer serves every batch: armed at an answered batch's deadline, it
    must look again at the call still waiting rather than fail it early."""
    import os
    import signal
    import time

    deadline = 0.6

    async def scenario() -> tuple[float, object]:
        store = await RedisLimitStore.open(fresh_redis.url, timeout_seconds=deadline, cluster=False)
        assert fresh_redis.process is not None
        pid = fresh_redis.process.pid
        try:
            bucket = requests_bucket(name="stuck", capacity=100)
            assert (await store.admit(admission(buckets=(bucket,)))).allowed
            await asyncio.sleep(deadline / 2)  # the first batch's deadline is half gone
            os.kill(pid, signal.SIGSTOP)
            started = time.monotonic()
            try:
                outcome: object = await store.admit(admission(buckets=(bucket,)))
            except StoreUnavailable as error:
                outcome = error
            return time.monotonic() - started, outcome
        finally:
            os.kill(pid, signal.SIGCONT)
            await store.close()

    waited, outcome = asyncio.run(scenario())
    assert isinstance(outcome, StoreUnavailable)
    assert deadline * 0.9 <= waited < deadline + 0.5
