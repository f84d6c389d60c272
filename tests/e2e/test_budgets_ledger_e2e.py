"""Budgets and the spend ledger through real gateway processes on one Redis: no
overshoot under concurrency, one ledger record per served request (through a Redis
crash and a SIGTERM too), abandoned streams billed, and the two spend readers agreeing
with the ledger."""

from __future__ import annotations

import asyncio
import csv
import io
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import openai
import pytest
import redis

from gateway.limits import redis_keys
from gateway.limits.spec import usd_to_micros
from gateway.metering.ledger_record import LedgerRecord
from tests.e2e.conftest import BUDGET_KEY, BUDGET_USD, METERED_KEY
from tests.e2e.support import (
    ADMIN_KEY,
    Answer,
    ask,
    async_client,
    close_all,
    forget_script,
    ledger_records,
    model,
    readiness,
    server_config,
    spread,
    start_all,
    stop_all,
    store_config,
    sync_client,
    tenant,
    tracebacks,
    wait_for,
)
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import REPO, GatewayProcess
from tests.support.redis_server import RedisServer

DURABLE_KEY = "sk-e2e-durable"


def served_ids(answers: list[Answer]) -> list[str]:
    return [a.request_id for a in answers if a.status == 200]


def records_of(redis_url: str, tenant_id: str) -> list[LedgerRecord]:
    return [r for r in ledger_records(redis_url) if r.tenant == tenant_id]


def test_thousand_concurrent_requests_never_overspend_the_budget_and_each_is_recorded_once(
    replicas: list[GatewayProcess], shared_redis: RedisServer
) -> None:
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    budget_key = redis_keys.budget_key(
        redis_keys.tenant_prefix("gw", "budget"), "tenant", f"day:{day}"
    )
    store = redis.Redis.from_url(shared_redis.url)

    def settled(answers: list[Answer]) -> bool:
        """Every served request's reservation is replaced by its real cost."""
        charged = sum(
            usd_to_micros(Decimal(a.headers["x-gateway-cost-usd"]))
            for a in answers
            if a.status == 200
        )
        return int(store.hget(budget_key, "spent") or 0) == charged

    async def burst() -> list[Answer]:
        clients = [async_client(g, BUDGET_KEY, connections=400) for g in replicas]
        answers = await spread(clients, 1000, "priced-model", max_tokens=4)
        await close_all(clients)
        return answers

    async def drain(answers: list[Answer]) -> None:
        """One at a time until refused: what the burst's reservations held back."""
        clients = [async_client(g, BUDGET_KEY) for g in replicas]
        while True:
            answers.append(await ask(clients[len(answers) % 3], "priced-model", max_tokens=4))
            if answers[-1].status != 200:
                break
            assert await asyncio.to_thread(wait_for, lambda: settled(answers), 10)
        await close_all(clients)

    answers = asyncio.run(burst())
    in_burst = Counter(a.status for a in answers)
    assert wait_for(lambda: settled(answers), 15)
    asyncio.run(drain(answers))
    served = served_ids(answers)
    refused = [a for a in answers if a.status == 429]
    assert len(served) + len(refused) == len(answers), Counter(a.status for a in answers)
    assert in_burst[200] and in_burst[429]
    assert {a.code for a in refused} == {"insufficient_quota"}
    # the gateway's own figure for one request's worst case, from its refusal message
    worst = max(
        Decimal(m) for a in refused for m in re.findall(r"up to \$(\d+(?:\.\d+)?)", str(a.error))
    )

    assert wait_for(lambda: len(records_of(shared_redis.url, "budget")) >= len(served), 15)
    records = records_of(shared_redis.url, "budget")
    ids = [r.request_id for r in records]
    assert len(ids) == len(set(ids)), "a request was recorded twice"
    assert set(ids) == set(served)
    spent = sum((r.cost for r in records), Decimal(0))
    assert spent <= BUDGET_USD + worst, (spent, worst)
    # drained one at a time, the budget is used up to within one worst case
    assert spent > BUDGET_USD - worst, spent
    # settlement replaced every reservation by the real cost
    assert wait_for(lambda: settled(answers), 10)
    store.close()
    print(
        f"budget: burst {in_burst[200]} served / {in_burst[429]} refused, then "
        f"{len(served) - in_burst[200]} more one at a time; spent ${spent} of ${BUDGET_USD} "
        f"(worst case per request ${worst})"
    )


def test_client_disconnect_mid_stream_is_recorded_with_the_tokens_generated(
    replicas: list[GatewayProcess], upstream: OpenAIFake, shared_redis: RedisServer
) -> None:
    upstream.enqueue(Reply(words=[f"w{i}" for i in range(200)], chunk_delay=0.02))
    client = sync_client(replicas[2], METERED_KEY)
    try:
        stream = client.chat.completions.create(
            model="chat-model",
            messages=[{"role": "user", "content": "tell me a long story"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        request_id = stream.response.headers["x-request-id"]
        seen = 0
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen += 1
                if seen == 5:
                    break
        stream.close()
    finally:
        forget_script(upstream)

    def record() -> LedgerRecord | None:
        found = [r for r in ledger_records(shared_redis.url) if r.request_id == request_id]
        return found[0] if found else None

    assert wait_for(lambda: record() is not None, 10)
    abandoned = record()
    assert abandoned is not None
    assert abandoned.status == 499
    # no usage ever arrived: the gateway counted what it streamed, and says so
    assert abandoned.estimated is True
    assert 5 <= abandoned.output_tokens < 200
    assert abandoned.input_tokens > 0
    assert abandoned.cost > 0
    assert (abandoned.tenant, abandoned.key_id, abandoned.model) == (
        "metered",
        "metered",
        "chat-model",
    )


def test_spend_command_and_admin_endpoint_agree_with_the_ledger_to_the_cent(
    replicas: list[GatewayProcess], shared_redis: RedisServer
) -> None:
    client = sync_client(replicas[0], METERED_KEY)
    for _ in range(3):
        client.chat.completions.create(
            model="priced-model", messages=[{"role": "user", "content": "hi"}]
        )
    # everything the gateways served is in the ledger: no queue left anywhere
    assert wait_for(lambda: all(readiness(g)[1]["ledger_queue_depth"] == 0 for g in replicas), 10)
    time.sleep(0.3)
    ledger: dict[str, tuple[int, Decimal]] = {}
    for record in ledger_records(shared_redis.url):
        count, cost = ledger.get(record.tenant, (0, Decimal(0)))
        ledger[record.tenant] = (count + 1, cost + record.cost)
    assert ledger["metered"][0] >= 3

    today = datetime.now(UTC).date()
    whole_days = {"from": today.isoformat(), "to": (today + timedelta(days=1)).isoformat()}
    for window in ({}, whole_days):
        response = httpx.get(
            replicas[1].url + "/admin/spend",
            params={"group_by": "tenant", **window},
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert response.status_code == 200
        body = response.json()
        admin = {row["group"]: (row["requests"], Decimal(row["cost_usd"])) for row in body["rows"]}
        assert admin == ledger, (body["source"], admin, ledger)

        args = ["--group-by", "tenant", "--csv"]
        if window:
            args += ["--since", window["from"], "--until", window["to"]]
        printed = subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway.cli.main",
                "spend",
                "--config",
                str(replicas[2].config_path),
                *args,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        rows = list(csv.DictReader(io.StringIO(printed)))
        command = {
            row["tenant"]: (int(row["requests"]), Decimal(row["cost_usd"]))
            for row in rows
            if row["tenant"] != "total"
        }
        assert command == ledger
        total = sum((cost for _, cost in ledger.values()), Decimal(0))
        assert Decimal(rows[-1]["cost_usd"]).quantize(Decimal("0.01")) == total.quantize(
            Decimal("0.01")
        )
        assert Decimal(rows[-1]["cost_usd"]) == total
    forbidden = httpx.get(replicas[0].url + "/admin/spend", headers={"authorization": "Bearer no"})
    assert forbidden.status_code == 401


@dataclass
class Durable:
    redis: RedisServer
    gateways: list[GatewayProcess]


@pytest.fixture(scope="module")
def durable(upstream: OpenAIFake) -> Iterator[Durable]:
    """A Redis that survives being killed (append-only file, fsync on every write) under
    two fail_open gateways, which keep serving while it is down."""
    server = RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
    server.start()
    spill = tempfile.mkdtemp(prefix="gw-e2e-spill-")
    store = store_config(server.url, timeout_ms=200, spill_dir=spill)
    policy = {
        "models": {"chat-model": model("upstream-chat", 1, 2)},
        "tenants": {
            "durable": tenant("durable", DURABLE_KEY, limits={"requests_per_minute": 1_000_000})
        },
    }
    config = server_config(upstream.base_url, store, grace_seconds=8)
    gateways = start_all(GatewayProcess(config, policy) for _ in range(2))
    yield Durable(server, gateways)
    stop_all(gateways)
    server.stop()


def test_redis_killed_mid_load_the_ledger_ends_with_every_served_request_once(
    durable: Durable,
) -> None:
    async def load() -> tuple[list[Answer], int]:
        clients = [async_client(g, DURABLE_KEY, connections=4) for g in durable.gateways]
        answers: list[Answer] = []
        while_down: list[Answer] = []
        running = True
        down = False

        async def worker(client: openai.AsyncOpenAI) -> None:
            while running:
                answer = await ask(client, "chat-model")
                answers.append(answer)
                if down:
                    while_down.append(answer)

        workers = [asyncio.ensure_future(worker(c)) for c in clients for _ in range(4)]
        await asyncio.sleep(0.5)
        await asyncio.to_thread(durable.redis.stop, True)
        down = True
        await asyncio.sleep(0.8)
        down = False
        await asyncio.to_thread(durable.redis.start)
        await asyncio.sleep(0.5)
        running = False
        await asyncio.gather(*workers)
        await close_all(clients)
        return answers, len([a for a in while_down if a.status == 200])

    answers, served_while_down = asyncio.run(load())
    served = served_ids(answers)
    refused = [(a.status, a.error.body if a.error else None) for a in answers if a.status != 200]
    assert refused == [], tracebacks(durable.gateways)
    assert served_while_down > 0
    assert wait_for(lambda: len(records_of(durable.redis.url, "durable")) >= len(served), 20)
    time.sleep(0.5)  # a late duplicate would land now
    ids = [r.request_id for r in records_of(durable.redis.url, "durable")]
    assert len(ids) == len(set(ids)), "a request was recorded twice"
    assert set(ids) == set(served)
    print(f"redis kill: {len(served)} served ({served_while_down} while down), all recorded once")


def test_sigterm_with_records_queued_flushes_them(durable: Durable) -> None:
    gateway = durable.gateways[1]
    before = {r.request_id for r in ledger_records(durable.redis.url)}
    durable.redis.stop(kill=True)
    try:

        async def send() -> list[Answer]:
            client = async_client(gateway, DURABLE_KEY, connections=10)
            answers = list(await asyncio.gather(*(ask(client, "chat-model") for _ in range(20))))
            await close_all([client])
            return answers

        answers = asyncio.run(send())
        assert [a.status for a in answers] == [200] * 20
        # Redis is down: the records can only wait in the gateway's queue
        assert wait_for(lambda: readiness(gateway)[1]["ledger_queue_depth"] == 20, 5)
        gateway.signal()
        time.sleep(0.3)
    finally:
        durable.redis.start()
    assert gateway.process is not None
    assert gateway.process.wait(timeout=20) == 0
    after = [r.request_id for r in ledger_records(durable.redis.url) if r.request_id not in before]
    assert sorted(after) == sorted(served_ids(answers))
    print(f"sigterm: {len(after)} queued records flushed on shutdown")
