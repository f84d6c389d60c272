"""Three gateway processes on a real Redis Cluster (3 masters, one replica each): request,
token and budget limits hold across the fleet as on one Redis, and a master failover
under load delays no request past the store timeout, loses no ledger record, and leaves
the limits exact a second later."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam
from redis.cluster import RedisCluster

from gateway.limits import redis_keys as keys
from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger_record import LedgerRecord
from tests.e2e.support import (
    Answer,
    ask,
    async_client,
    close_all,
    model,
    server_config,
    spread,
    start_all,
    stop_all,
    tenant,
    wait_for,
)
from tests.fakes.openai_server import OpenAIFake
from tests.fleet.redis_cluster import RedisCluster6
from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.skipif(
    shutil.which("redis-cli") is None,
    reason="redis-cli is needed to create a Redis Cluster (`redis-cli --cluster create`)",
)

GATEWAYS = 3
STORE_TIMEOUT_MS = 2000
REQUESTS_PER_MINUTE = 60
TOKENS_PER_MINUTE = 3000
BUDGET_USD = Decimal("0.5")
FRESH_RPM = 30
# tenants whose limits are first touched after the failover; one lives on each master
FRESH_TENANTS = [f"fresh-{i}" for i in range(12)]
LOAD_TENANTS = [f"load-{i}" for i in range(6)]
# 49 words: the fake echoes them back as a 50-token completion
LONG_PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": " ".join(["word"] * 49)}
]


def key_of(name: str) -> str:
    return f"sk-fleet-{name}"


def policy() -> dict[str, Any]:
    rpm = {"requests_per_minute": REQUESTS_PER_MINUTE}
    tpm = {"tokens_per_minute": TOKENS_PER_MINUTE}
    budget = [{"usd": float(BUDGET_USD), "period": "day"}]
    tenants = {
        "burst": tenant("burst", key_of("burst"), limits=rpm),
        "tokens": tenant("tokens", key_of("tokens"), limits=tpm),
        "giant": tenant("giant", key_of("giant"), limits={"tokens_per_minute": 1000}),
        "budget": tenant("budget", key_of("budget"), budgets=budget),
    }
    for name in FRESH_TENANTS:
        tenants[name] = tenant(name, key_of(name), limits={"requests_per_minute": FRESH_RPM})
    for name in LOAD_TENANTS:
        tenants[name] = tenant(name, key_of(name))
    return {
        "models": {
            "chat-model": model("upstream-chat", 1, 2),
            "priced-model": model("upstream-priced", 1000, 10000),
        },
        "tenants": tenants,
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster6]:
    nodes = RedisCluster6()
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIFake]:
    with OpenAIFake() as fake:
        yield fake


@pytest.fixture(scope="module")
def fleet(cluster: RedisCluster6, upstream: OpenAIFake) -> Iterator[list[GatewayProcess]]:
    store = {
        "kind": "redis",
        "redis_url": cluster.url,
        "timeout_ms": STORE_TIMEOUT_MS,
        "on_failure": "fail_open",
        # no `cluster:`: the gateway asks the seed node (INFO cluster), as in production
        "probe_interval_seconds": 0.2,
    }
    config = server_config(upstream.base_url, store)
    gateways = start_all(GatewayProcess(config, policy()) for _ in range(GATEWAYS))
    yield gateways
    stop_all(gateways)


def ledger(cluster: RedisCluster6) -> list[LedgerRecord]:
    client = RedisCluster.from_url(cluster.url)
    try:
        entries = client.xrange(LedgerKeys("gw").stream, "-", "+")
    finally:
        client.close()
    return [LedgerRecord.from_json(fields[b"record"]) for _, fields in entries]


def access_log_times(
    gateways: list[GatewayProcess], request_ids: set[str]
) -> dict[str, tuple[float, float]]:
    """request id -> (latency_ms, upstream_ms) from the gateways' JSON access logs."""
    times = {}
    for gateway in gateways:
        for line in gateway.log().splitlines():
            if '"gateway.access"' not in line:
                continue
            entry = json.loads(line)
            if entry["request_id"] in request_ids:
                times[entry["request_id"]] = (entry["latency_ms"], entry.get("upstream_ms", 0.0))
    return times


def metric_total(gateway: GatewayProcess, name: str) -> float:
    text = httpx.get(gateway.url + "/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def served(answers: list[Answer]) -> list[Answer]:
    return [a for a in answers if a.status == 200]


async def burst(
    gateways: list[GatewayProcess], key: str, count: int, **options: Any
) -> tuple[list[Answer], float]:
    clients = [async_client(g, key) for g in gateways]
    started = time.monotonic()
    answers = await spread(clients, count, options.pop("model", "chat-model"), **options)
    elapsed = time.monotonic() - started
    await close_all(clients)
    return answers, elapsed


def assert_exact_request_limit(answers: list[Answer], elapsed: float, limit: int) -> int:
    admitted = served(answers)
    refused = [a for a in answers if a.status == 429]
    assert len(admitted) + len(refused) == len(answers), Counter(a.status for a in answers)
    assert {a.code for a in refused} == {"rate_limit_exceeded"}
    # a continuous bucket refills limit/60 per second while the burst runs
    refill = int(elapsed * limit / 60)
    assert limit <= len(admitted) <= limit + refill, (len(admitted), elapsed)
    return len(admitted)


def test_the_cluster_spreads_the_fleet_state_over_every_master(cluster: RedisCluster6) -> None:
    masters = [n for n in cluster.nodes() if n.role == "master"]
    assert len(masters) == 3 and all(cluster.replica_of(m) for m in masters)
    homes = {cluster.master_of(keys.tenant_prefix("gw", name)).node_id for name in FRESH_TENANTS}
    assert len(homes) == 3


def test_a_request_limit_is_exact_across_three_gateways(fleet: list[GatewayProcess]) -> None:
    answers, elapsed = asyncio.run(burst(fleet, key_of("burst"), REQUESTS_PER_MINUTE * 3))
    admitted = assert_exact_request_limit(answers, elapsed, REQUESTS_PER_MINUTE)
    print(f"cluster rpm: {admitted} of {len(answers)} admitted in {elapsed:.2f} s")


def test_a_token_limit_holds_within_one_reservation_across_three_gateways(
    fleet: list[GatewayProcess],
) -> None:
    async def run() -> tuple[int, list[Answer], float]:
        giant = async_client(fleet[0], key_of("giant"))
        probe = await giant.chat.completions.with_raw_response.create(
            model="chat-model", messages=LONG_PROMPT, max_tokens=60
        )
        reservation = 1000 - int(probe.headers["x-ratelimit-remaining-tokens"])
        await giant.close()
        answers, elapsed = await burst(
            fleet, key_of("tokens"), 120, messages=LONG_PROMPT, max_tokens=60
        )
        return reservation, answers, elapsed

    reservation, answers, elapsed = asyncio.run(run())
    admitted = served(answers)
    refused = [a for a in answers if a.status == 429]
    assert len(admitted) + len(refused) == len(answers)
    assert refused and all("tokens per minute" in str(a.error) for a in refused)
    (actual,) = {a.prompt_tokens + a.completion_tokens for a in admitted}
    used = sum(a.prompt_tokens + a.completion_tokens for a in admitted)
    allowance = TOKENS_PER_MINUTE + elapsed * TOKENS_PER_MINUTE / 60
    assert used <= allowance + reservation, (used, allowance, reservation)
    assert used >= (TOKENS_PER_MINUTE - reservation) * actual // reservation
    print(f"cluster tpm: {len(admitted)} admitted, {used} tokens of {allowance:.0f}")


def test_a_budget_is_never_overspent_across_three_gateways(
    fleet: list[GatewayProcess], cluster: RedisCluster6
) -> None:
    async def run() -> list[Answer]:
        answers, _ = await burst(fleet, key_of("budget"), 150, model="priced-model", max_tokens=4)
        clients = [async_client(g, key_of("budget")) for g in fleet]
        # then one at a time until refused: what the burst's reservations held back
        while answers[-1].status == 200 or len(answers) == 150:
            answers.append(await ask(clients[len(answers) % 3], "priced-model", max_tokens=4))
        await close_all(clients)
        return answers

    answers = asyncio.run(run())
    refused = [a for a in answers if a.status == 429]
    assert len(served(answers)) + len(refused) == len(answers)
    assert {a.code for a in refused} == {"insufficient_quota"}
    worst = max(
        Decimal(m) for a in refused for m in re.findall(r"up to \$(\d+(?:\.\d+)?)", str(a.error))
    )
    ids = {a.request_id for a in served(answers)}
    assert wait_for(lambda: ids <= {r.request_id for r in ledger(cluster)}, 15)
    spent = sum((r.cost for r in ledger(cluster) if r.tenant == "budget"), Decimal(0))
    assert spent <= BUDGET_USD + worst, (spent, worst)
    assert spent > BUDGET_USD - worst, spent
    print(f"cluster budget: {len(ids)} served, spent ${spent} of ${BUDGET_USD} (worst ${worst})")


def test_a_master_failover_under_load_delays_nothing_past_the_timeout_and_loses_nothing(
    fleet: list[GatewayProcess], cluster: RedisCluster6
) -> None:
    # the master that holds the ledger stream, and with it some of the load's tenants
    old_master = cluster.master_of(LedgerKeys("gw").stream)
    replica = cluster.replica_of(old_master)
    on_old_master = [
        name for name in LOAD_TENANTS
        if cluster.master_of(keys.tenant_prefix("gw", name)).node_id == old_master.node_id
    ]  # fmt: skip
    answers: list[Answer] = []
    timeline: dict[str, float] = {}

    async def load(stop: asyncio.Event, worker: int) -> None:
        names = LOAD_TENANTS[worker % len(LOAD_TENANTS)]
        client = async_client(fleet[worker % GATEWAYS], key_of(names))
        while not stop.is_set():
            answers.append(await ask(client, "chat-model", max_tokens=8))
        await client.close()

    async def run() -> None:
        stop = asyncio.Event()
        workers = [asyncio.create_task(load(stop, i)) for i in range(18)]
        await asyncio.sleep(1.0)
        timeline["failover"] = time.monotonic()
        await asyncio.to_thread(cluster.failover, replica)
        timeline["promoted"] = time.monotonic()
        await asyncio.to_thread(cluster.kill, old_master.port)
        timeline["killed"] = time.monotonic()
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*workers)

    asyncio.run(run())
    assert cluster.master_of(LedgerKeys("gw").stream).node_id == replica.node_id
    statuses = Counter(a.status for a in answers)
    assert statuses == Counter({200: len(answers)}), statuses
    slowest = max(a.seconds for a in answers)
    request_ids = {a.request_id for a in answers}
    # the access log is written by a thread that drains on a timer
    assert wait_for(lambda: len(access_log_times(fleet, request_ids)) == len(answers), 10)
    server_side = access_log_times(fleet, request_ids)
    waited = max(latency - upstream for latency, upstream in server_side.values())
    # time in the gateway outside the upstream call: the store's timeout bounds its wait
    # on Redis, the rest (a few ms) gets a margin for a loaded 2-core machine
    assert waited < STORE_TIMEOUT_MS + 500, waited
    redis_errors = sum(metric_total(g, "gateway_redis_errors_total") for g in fleet)

    # a second after the failover, limits homed on the promoted master are exact again
    fresh = next(
        name for name in FRESH_TENANTS
        if cluster.master_of(keys.tenant_prefix("gw", name)).node_id == replica.node_id
    )  # fmt: skip
    time.sleep(max(0.0, timeline["killed"] + 1.0 - time.monotonic()))
    after, elapsed = asyncio.run(burst(fleet, key_of(fresh), FRESH_RPM * 3))
    assert_exact_request_limit(after, elapsed, FRESH_RPM)

    ids = [a.request_id for a in answers]
    assert wait_for(lambda: set(ids) <= {r.request_id for r in ledger(cluster)}, 20)
    recorded = Counter(r.request_id for r in ledger(cluster))
    assert all(recorded[i] == 1 for i in ids), "a request was recorded twice"
    print(
        f"failover: {len(answers)} requests under load, all served; longest wait in a gateway "
        f"{waited:.0f} ms (client-side slowest {slowest:.3f} s), {redis_errors:.0f} Redis errors; "
        f"promotion took {timeline['promoted'] - timeline['failover']:.2f} s; "
        f"{len(on_old_master)} load tenants lived on the old master; "
        "every request in the ledger once"
    )
