"""What one process's copy of the runtime keys holds after key churn, printed as a table.

    .venv/bin/python bench/admin_snapshot_memory.py [--churned 2000] [--live 20]

On a throwaway redis-server, through the admin API's own operations (TenancyAdmin over
RuntimeKeys and RedisAdminStore, as a gateway process runs them): one tenant, `--live`
keys that stay, then `--churned` keys each issued and revoked (the soak's churn). Then:
- the bytes a snapshot read carries: the fields and values of the hashes it reads
  (tenants and keys: the same two on every version of the store);
- the memory one snapshot holds (tracemalloc: traced bytes while a freshly decoded
  snapshot is alive, less those before it), and that divided by the keys ever issued.
Memory only, no timing: the numbers do not depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tracemalloc
from pathlib import Path

import redis
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.admin import RedisAdminStore
from gateway.admin import decisions as decide
from gateway.admin.runtime_keys import RuntimeKeys
from gateway.admin.tenancy import TenancyAdmin
from gateway.settings.policy import Policy
from tests.support.redis_server import RedisServer

ACTOR = decide.Actor("bench", "127.0.0.1")


class NoMetrics:
    def change(self, action: str, outcome: str) -> None:
        pass


async def churn(url: str, live: int, churned: int) -> int:
    client = aioredis.from_url(url)
    store = RedisAdminStore(client)
    keys = RuntimeKeys(store, lambda snapshot: None)
    admin = TenancyAdmin(keys, Policy, NoMetrics())
    await admin.create_tenant(decide.NewTenant(id="churn"), ACTOR)
    for i in range(live):
        await admin.issue_key(decide.NewKey(tenant="churn", id=f"live-{i}"), ACTOR)
    for i in range(churned):
        await admin.issue_key(decide.NewKey(tenant="churn", id=f"gone-{i}"), ACTOR)
        await admin.revoke_key(f"gone-{i}", ACTOR)
    listed = await admin.keys("churn")
    await client.aclose()
    return len(listed)


async def held_by_a_snapshot(url: str) -> tuple[int, int, int]:
    """(bytes held, keys held, records' JSON bytes held) by one freshly read snapshot."""
    client = aioredis.from_url(url)
    store = RedisAdminStore(client)
    await store.snapshot()  # the first read may tidy the store; measure the steady one
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    snapshot = await store.snapshot()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    await client.aclose()
    return held, len(snapshot.keys), sum(len(raw) for raw in snapshot.key_json.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--churned", type=int, default=2000)
    parser.add_argument("--live", type=int, default=20)
    args = parser.parse_args()
    server = RedisServer()
    server.start()
    try:
        listed = asyncio.run(churn(server.url, args.live, args.churned))
        sync = redis.Redis.from_url(server.url)
        read = sum(
            len(field) + len(value)
            for name in ("tenants", "keys")
            for field, value in sync.hgetall(f"gw:{{admin}}:{name}").items()
        )
        sync.close()
        held, held_keys, held_json = asyncio.run(held_by_a_snapshot(server.url))
    finally:
        server.stop()
    issued = args.live + args.churned
    print(f"keys issued {issued} (live {args.live}, revoked {args.churned}), listed {listed}")
    print(f"snapshot read: {read:>12,} bytes of hash fields and values")
    print(f"snapshot held: {held:>12,} bytes (tracemalloc), {held_keys} key records")
    print(f"               {held_json:>12,} bytes of stored JSON among them")
    print(f"per key issued: {held / issued:>10,.0f} bytes held, {read / issued:,.0f} bytes read")


if __name__ == "__main__":
    main()
