"""What runtime keys cost and how fast they travel, printed as two tables.

    .venv/bin/python bench/admin_keys.py [--rounds 10] [--keys 0,1000,10000]

1. Propagation, three `gateway serve` processes on one Redis (the fake OpenAI upstream
   behind them): a key issued on replica 0 is used at once on replicas 1 and 2 (the time
   of that first request, which includes the one version check an unknown key gets);
   then the key is revoked on replica 0 and each replica is asked, by its own thread,
   until it refuses (the time from the revoke's answer to the end of the first 401, so
   it includes that request's own time). Distribution over --rounds.
2. In one process: what a change costs each process (rebuilding its view with N runtime
   keys beside the YAML ones) and what authenticating a runtime key costs against a YAML
   one, per call (timeit, best of 5).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.admin.client_keys import hash_key
from gateway.admin.merge import merge
from gateway.admin.records import AdminSnapshot, KeyRecord, TenantRecord
from gateway.pipeline.policy_view import PolicyView
from gateway.settings.policy import Policy
from tests.e2e.support import ADMIN_KEY, model, server_config, store_config
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash
from tests.support.redis_server import RedisServer

HELLO = [{"role": "user", "content": "hi"}]


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    return f"{ordered[0]:8.1f} {p50:8.1f} {ordered[-1]:8.1f}"


def until_refused(client: openai.OpenAI, since: float) -> float:
    """Milliseconds from `since` to the end of the first request the replica refused."""
    while True:
        try:
            client.chat.completions.create(model="chat-model", messages=HELLO)  # type: ignore[arg-type]
        except openai.AuthenticationError:
            return (time.perf_counter() - since) * 1000


def propagation(rounds: int) -> None:
    redis_server = RedisServer()
    redis_server.start()
    policy = {
        "models": {"chat-model": model("upstream-chat", 1, 2)},
        "tenants": {"yaml": {"keys": [{"id": "y", "hash": key_hash("sk-yaml")}]}},
    }
    store = store_config(redis_server.url, timeout_ms=2000, on_failure="fail_closed")
    with OpenAIFake() as fake:
        gateways = [GatewayProcess(server_config(fake.base_url, store), policy) for _ in range(3)]
        for gateway in gateways:
            gateway.start()
        try:
            first_use: list[float] = []
            refused: list[float] = []
            admin = httpx.Client(
                base_url=gateways[0].url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
            )
            admin.post("/admin/tenants", json={"id": "bench"})
            for n in range(rounds):
                key = admin.post("/admin/keys", json={"tenant": "bench", "id": f"k{n}"}).json()[
                    "key"
                ]
                for gateway in gateways[1:]:
                    client = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)
                    started = time.perf_counter()
                    client.chat.completions.create(model="chat-model", messages=HELLO)
                    first_use.append((time.perf_counter() - started) * 1000)
                clients = [
                    openai.OpenAI(base_url=g.base_url, api_key=key, max_retries=0) for g in gateways
                ]
                admin.post(f"/admin/keys/k{n}/revoke")
                revoked = time.perf_counter()
                # one asker per replica, side by side: each replica's own delay
                with ThreadPoolExecutor(len(clients)) as pool:
                    refused.extend(pool.map(until_refused, clients, [revoked] * len(clients)))
        finally:
            for gateway in gateways:
                gateway.stop()
            redis_server.stop()
    print(f"propagation, {rounds} rounds, 3 replicas, runtime_keys_poll_ms 100 (ms)")
    print(f"{'':42} {'min':>8} {'median':>8} {'max':>8}")
    print(f"{'first request with a key new to the replica':42} {percentiles(first_use)}")
    print(f"{'revoke answered -> refused (each replica)':42} {percentiles(refused)}")


def snapshot_of(n: int) -> AdminSnapshot:
    tenants = {f"t{i}": TenantRecord(id=f"t{i}", created_at=0, created_by="b") for i in range(10)}
    keys = {
        f"k{i}": KeyRecord(
            id=f"k{i}",
            tenant=f"t{i % 10}",
            hash=hash_key(f"key-{i}"),
            hint="0000",
            created_at=0,
            created_by="b",
        )
        for i in range(n)
    }
    return AdminSnapshot(1, tenants, keys)


def best_of(call: Callable[[], object], runs: int) -> float:
    return min(timeit.repeat(call, number=runs, repeat=5))


def local_costs(sizes: list[int]) -> None:
    policy = Policy.model_validate(
        {
            "models": {"m": {"deployments": [{"provider": "p", "upstream_model": "u"}]}},
            "tenants": {"yaml": {"keys": [{"id": "y", "hash": hash_key("sk-yaml")}]}},
        }
    )
    print()
    print("per process, in memory (best of 5)")
    print(
        f"{'runtime keys':>12} {'rebuild view ms':>16} {'auth yaml us':>13} {'auth runtime us':>16}"
    )
    for n in sizes:
        snapshot = snapshot_of(n)

        def rebuild(snapshot: AdminSnapshot = snapshot) -> PolicyView:
            merged = merge(policy, snapshot, time.time())
            return PolicyView.build(merged.policy, merged.retiring)

        rebuild_ms = min(timeit.repeat(rebuild, number=1, repeat=5)) * 1000
        index = rebuild().keys
        runs = 20000
        yaml_us = best_of(partial(index.authenticate, "sk-yaml"), runs)
        runtime_us = best_of(partial(index.authenticate, "key-0"), runs) if n else yaml_us
        print(
            f"{n:>12} {rebuild_ms:>16.2f} {yaml_us / runs * 1e6:>13.2f} "
            f"{runtime_us / runs * 1e6:>16.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--keys", default="0,1000,10000")
    args = parser.parse_args()
    propagation(args.rounds)
    local_costs([int(n) for n in args.keys.split(",")])


if __name__ == "__main__":
    main()
