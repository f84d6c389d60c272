"""kill -9 of a gateway under load loses no ledger record: every request the client got a
whole answer for (streamed or not) is in the ledger exactly once after a restart."""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from collections import Counter

import openai

from tests.e2e.support import (
    HELLO,
    async_client,
    close_all,
    ledger_records,
    model,
    server_config,
    store_config,
    tenant,
    wait_for,
)
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

KILLED_KEY = "sk-e2e-killed"
PREFIX = "killed"
ANSWERED_BEFORE_KILL = 200


async def answer_once(client: openai.AsyncOpenAI, stream: bool) -> str | None:
    """The request id of one complete answer, or None when it did not complete."""
    try:
        if not stream:
            raw = await client.chat.completions.with_raw_response.create(
                model="chat-model", messages=HELLO
            )
            raw.parse()
            return raw.headers["x-request-id"]
        raw_stream = await client.chat.completions.with_raw_response.create(
            model="chat-model", messages=HELLO, stream=True
        )
        async for _ in raw_stream.parse():
            pass  # the SDK ends the loop at `data: [DONE]` and raises on a cut stream
        return raw_stream.headers["x-request-id"]
    except openai.APIError:
        return None


async def load_until_killed(
    gateway: GatewayProcess, answered_before_kill: int
) -> tuple[list[str], int]:
    """Eight clients sending (half of them streams) until `answered_before_kill` answers
    have come back; then the gateway gets SIGKILL while they keep sending."""
    client = async_client(gateway, KILLED_KEY, connections=8)
    answered: list[str] = []
    failed = 0
    alive = True
    enough = asyncio.Event()

    async def sender(stream: bool) -> None:
        nonlocal failed
        while alive:
            request_id = await answer_once(client, stream)
            if request_id is None:
                failed += 1
                await asyncio.sleep(0.01)
            else:
                answered.append(request_id)
                if len(answered) >= answered_before_kill:
                    enough.set()

    senders = [asyncio.ensure_future(sender(n % 2 == 0)) for n in range(8)]
    await enough.wait()
    gateway.signal(signal.SIGKILL)
    await asyncio.to_thread(gateway.process.wait)  # type: ignore[union-attr]
    alive = False
    await asyncio.gather(*senders)
    await close_all([client])
    return answered, failed


def test_kill_9_under_load_then_restart_leaves_every_answered_request_in_the_ledger_once(
    upstream: OpenAIFake, fresh_redis: RedisServer
) -> None:
    spill = tempfile.mkdtemp(prefix="gw-e2e-killed-")
    store = store_config(fresh_redis.url, timeout_ms=2000, spill_dir=spill)
    store["key_prefix"] = PREFIX
    policy = {
        "models": {"chat-model": model("upstream-chat", 1, 2)},
        "tenants": {"killed": tenant("killed", KILLED_KEY)},
    }
    config = server_config(upstream.base_url, store)
    gateway = GatewayProcess(config, policy).start()
    try:
        answered, failed = asyncio.run(load_until_killed(gateway, ANSWERED_BEFORE_KILL))
    finally:
        gateway.stop()
    assert len(answered) >= ANSWERED_BEFORE_KILL and len(set(answered)) == len(answered)

    def ledger_ids() -> list[str]:
        return [r.request_id for r in ledger_records(fresh_redis.url, PREFIX)]

    recorded_before_restart = len(ledger_ids())
    successor = GatewayProcess(config, policy).start()
    try:
        assert wait_for(lambda: set(answered) <= set(ledger_ids()), timeout=20), (
            f"{len(set(answered) - set(ledger_ids()))} of {len(answered)} answered requests "
            f"missing from the ledger ({recorded_before_restart} were written before the kill)"
        )
        time.sleep(0.5)  # a late duplicate would land now
        counts = Counter(ledger_ids())
    finally:
        successor.stop()
    assert [rid for rid, n in counts.items() if n > 1] == [], "a request was recorded twice"
    # beyond the answered ones, only requests the kill cut short may be billed
    assert len(counts) - len(answered) <= failed
    print(
        f"kill -9: {len(answered)} answered, {recorded_before_restart} in the ledger at the "
        f"kill, {len(counts)} after the restart, {failed} requests cut short"
    )
