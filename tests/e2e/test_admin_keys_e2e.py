"""Runtime tenants and keys across three gateways on one Redis, with the openai SDK as
the client: a key issued on one replica works on the others at once, a revoked key is
refused by all three within a second, and a budget raised at runtime admits the next
request. Every change is in the audit stream, read from any replica."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import shared_policy
from tests.e2e.support import (
    ADMIN_KEY,
    HELLO,
    server_config,
    start_all,
    stop_all,
    store_config,
    sync_client,
    wait_for,
)
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer


def admin(gateway: GatewayProcess) -> httpx.Client:
    return httpx.Client(
        base_url=gateway.url,
        headers={"authorization": f"Bearer {ADMIN_KEY}", "x-gateway-actor": "e2e-operator"},
        timeout=10,
    )


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def fresh_id(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def test_a_key_issued_on_one_replica_works_on_the_others_at_once_and_revocation_is_fleet_wide(
    replicas: list[GatewayProcess],
) -> None:
    tenant, key_id = fresh_id("team"), fresh_id("key")
    with admin(replicas[0]) as first:
        created(first.post("/admin/tenants", json={"id": tenant}))
        issued = created(first.post("/admin/keys", json={"tenant": tenant, "id": key_id}))
    key = issued["key"]
    assert key.startswith("gw-") and "hash" not in issued
    # no wait: the other replicas have never seen this key when it arrives
    for gateway in (replicas[1], replicas[2], replicas[0]):
        reply = sync_client(gateway, key).chat.completions.with_raw_response.create(
            model="chat-model", messages=HELLO
        )
        assert reply.http_response.status_code == 200
        assert reply.parse().choices[0].message.content

    with admin(replicas[1]) as second:
        revoked = second.post(f"/admin/keys/{key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    revoked_at = time.monotonic()
    refused_after: dict[int, float] = {}
    while len(refused_after) < len(replicas) and time.monotonic() - revoked_at < 5:
        for index, gateway in enumerate(replicas):
            if index in refused_after:
                continue
            try:
                sync_client(gateway, key).chat.completions.create(
                    model="chat-model", messages=HELLO
                )
            except openai.AuthenticationError:
                refused_after[index] = time.monotonic() - revoked_at
    assert sorted(refused_after) == [0, 1, 2], refused_after
    assert max(refused_after.values()) < 1.0, refused_after
    # and it stays refused
    for gateway in replicas:
        with pytest.raises(openai.AuthenticationError):
            sync_client(gateway, key).chat.completions.create(model="chat-model", messages=HELLO)

    with admin(replicas[2]) as third:
        entries = third.get("/admin/audit", params={"limit": 50}).json()["data"]
    mine = [e for e in entries if e["tenant"] == tenant]
    assert [e["action"] for e in mine] == ["key.revoke", "key.create", "tenant.create"]
    assert {e["actor"] for e in mine} == {"e2e-operator"}
    assert all(e["at"] and int(e["version"]) > 0 for e in mine)


def test_a_budget_raised_at_runtime_admits_the_next_request(
    replicas: list[GatewayProcess],
) -> None:
    tenant, key_id = fresh_id("budgeted"), fresh_id("key")
    with admin(replicas[0]) as first:
        # a priced-model request reserves a few cents: one cent refuses it
        created(
            first.post(
                "/admin/tenants", json={"id": tenant, "budgets": [{"usd": 0.01, "period": "day"}]}
            )
        )
        key = created(first.post("/admin/keys", json={"tenant": tenant, "id": key_id}))["key"]
        with pytest.raises(openai.RateLimitError) as refused:
            sync_client(replicas[1], key).chat.completions.create(
                model="priced-model", messages=HELLO, max_tokens=4
            )
        assert refused.value.code == "insufficient_quota"
        raised = first.patch(f"/admin/tenants/{tenant}", json={"budgets": [{"usd": 100}]})
        assert raised.status_code == 200, raised.text
        assert raised.json()["budgets"] == [{"usd": "100", "period": "month"}]
    answer = sync_client(replicas[0], key).chat.completions.create(
        model="priced-model", messages=HELLO, max_tokens=4
    )
    assert answer.choices[0].message.content
    # the other replicas within a poll of the version counter
    deadline = time.monotonic() + 1.0
    admitted = False
    while not admitted and time.monotonic() < deadline:
        try:
            sync_client(replicas[2], key).chat.completions.create(
                model="priced-model", messages=HELLO, max_tokens=4
            )
            admitted = True
        except openai.RateLimitError:
            time.sleep(0.05)
    assert admitted


def test_a_rotated_key_keeps_working_through_its_grace_on_every_replica(
    replicas: list[GatewayProcess],
) -> None:
    tenant, key_id = fresh_id("rotating"), fresh_id("key")
    with admin(replicas[0]) as first:
        created(first.post("/admin/tenants", json={"id": tenant}))
        old = created(first.post("/admin/keys", json={"tenant": tenant, "id": key_id}))["key"]
        rotated = first.post(f"/admin/keys/{key_id}/rotate", json={"grace_seconds": 2})
    assert rotated.status_code == 200 and rotated.json()["status"] == "rotating"
    new = rotated.json()["key"]
    time.sleep(0.5)  # every replica polled the change
    for gateway in replicas:
        for key in (old, new):
            sync_client(gateway, key).chat.completions.create(model="chat-model", messages=HELLO)
    time.sleep(2.0)
    for gateway in replicas:
        with pytest.raises(openai.AuthenticationError, match="rotated"):
            sync_client(gateway, old).chat.completions.create(model="chat-model", messages=HELLO)
        sync_client(gateway, new).chat.completions.create(model="chat-model", messages=HELLO)


def test_with_redis_away_the_last_known_keys_serve_changes_are_refused_and_it_recovers(
    upstream: OpenAIFake,
) -> None:
    redis_server = RedisServer(extra_args=("--appendonly", "yes"))
    redis_server.start()
    store = store_config(redis_server.url, timeout_ms=500, on_failure="fail_open")
    gateways = start_all(
        GatewayProcess(server_config(upstream.base_url, store), shared_policy()) for _ in range(2)
    )
    try:
        with admin(gateways[0]) as first:
            created(first.post("/admin/tenants", json={"id": "outage-team"}))
            key = created(first.post("/admin/keys", json={"tenant": "outage-team", "id": "k"}))[
                "key"
            ]
        for gateway in gateways:
            sync_client(gateway, key).chat.completions.create(model="chat-model", messages=HELLO)
        redis_server.stop()
        # the last known set keeps serving (fail_open: without limits, as /readyz says)
        for gateway in gateways:
            sync_client(gateway, key).chat.completions.create(model="chat-model", messages=HELLO)
            with pytest.raises(openai.AuthenticationError):
                sync_client(gateway, "gw-never-issued").chat.completions.create(
                    model="chat-model", messages=HELLO
                )
        with admin(gateways[1]) as second:
            refused = second.post("/admin/keys/k/revoke")
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "admin_store_unavailable"
        # the gauge is refreshed once a second (a background tick, so it also works with
        # several worker processes): 2.5 s after the outage began it reads at least 1.5
        time.sleep(2.5)
        ages = [
            float(line.split()[-1])
            for gateway in gateways
            for line in httpx.get(gateway.url + "/metrics").text.splitlines()
            if line.startswith("gateway_runtime_keys_sync_age_seconds")
        ]
        assert ages and min(ages) >= 1.0

        redis_server.start()  # the same port and data (append-only file)
        with admin(gateways[1]) as second:
            assert wait_for(lambda: second.post("/admin/keys/k/revoke").status_code == 200, 10)
        revoked_at = time.monotonic()
        for gateway in gateways:
            assert wait_for(lambda g=gateway: refuses(g, key), 5)
        assert time.monotonic() - revoked_at < 2.0
    finally:
        stop_all(gateways)
        redis_server.stop()


def refuses(gateway: GatewayProcess, key: str) -> bool:
    try:
        sync_client(gateway, key).chat.completions.create(model="chat-model", messages=HELLO)
    except openai.AuthenticationError:
        return True
    return False
