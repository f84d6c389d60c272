"""The key layout on a real 3-node Redis Cluster: each script call stays in one slot, and
limits hold exactly across slots."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import redis
from redis.cluster import RedisCluster as SyncRedisCluster

from gateway.limits import (
    AdmissionRequest,
    RedisLimitStore,
    RequestLimits,
    plan_admission,
    settlement_for,
)
from gateway.limits.redis_keys import hash_tag
from gateway.settings.catalog import DeploymentSettings, ModelSettings, RateLimitSettings
from gateway.settings.tenants import BudgetSettings, KeySettings, TenantSettings
from tests.limits.cluster import RedisCluster3

pytestmark = pytest.mark.skipif(
    shutil.which("redis-cli") is None,
    reason="redis-cli is needed to create a Redis Cluster (`redis-cli --cluster create`)",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster3]:
    nodes = RedisCluster3()
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()


def request_limits(
    request_id: str,
    tenant_id: str,
    *,
    key_rpm: int = 100,
    deployment_rpm: int = 10_000,
    tenant_budget_usd: str = "100",
    deployment_id: str = "openai-gpt41",
) -> RequestLimits:
    key = KeySettings(
        id="k1",
        hash="sha256:" + "0" * 64,
        limits=RateLimitSettings(requests_per_minute=key_rpm, max_concurrent=1000),
    )
    tenant = TenantSettings(
        keys=[key],
        limits=RateLimitSettings(
            requests_per_minute=10_000, tokens_per_minute=600, tokens_burst=1_000_000
        ),
        budgets=[BudgetSettings(usd=Decimal(tenant_budget_usd), period="day")],
    )
    deployment = DeploymentSettings(
        provider="openai",
        upstream_model="gpt-4.1",
        limits=RateLimitSettings(requests_per_minute=deployment_rpm, tokens_per_minute=10**7),
    )
    model = ModelSettings(
        deployments=[deployment], limits=RateLimitSettings(requests_per_minute=5000)
    )
    return RequestLimits(
        request_id=request_id,
        tenant_id=tenant_id,
        tenant=tenant,
        key=key,
        model_alias="gpt-4.1",
        model=model,
        expected_tokens=500,
        worst_case_cost_usd=Decimal("0.01"),
        deployment_id=deployment_id,
        deployment=deployment,
    )


def plan(limits: RequestLimits) -> AdmissionRequest:
    return plan_admission(limits, now=datetime.now(UTC))


def all_keys(request: AdmissionRequest) -> list[str]:
    return [
        *(b.key for b in request.buckets),
        *(lease.key for lease in request.leases),
        *(g.key for g in request.budgets),
    ]


def test_a_request_touches_one_slot_per_tenant_and_one_per_deployment(
    cluster: RedisCluster3,
) -> None:
    request = plan(request_limits("r1", "acme"))
    with SyncRedisCluster.from_url(cluster.url) as client:
        slots = {key: client.keyslot(key) for key in all_keys(request)}
    tenant_slots = {slot for key, slot in slots.items() if hash_tag(key) == "t:acme"}
    deployment_slots = {slot for key, slot in slots.items() if hash_tag(key) == "d:openai-gpt41"}
    assert len(tenant_slots) == 1 and len(deployment_slots) == 1
    assert set(slots.values()) == tenant_slots | deployment_slots
    assert tenant_slots != deployment_slots


def test_key_limit_holds_exactly_on_a_cluster(cluster: RedisCluster3) -> None:
    async def scenario() -> tuple[int, float]:
        store = await RedisLimitStore.open(cluster.url, timeout_seconds=5)
        try:
            started = time.monotonic()
            answers = await asyncio.gather(
                *(store.admit(plan(request_limits(f"burst-{n}", "burst"))) for n in range(150))
            )
            took = time.monotonic() - started
        finally:
            await store.close()
        return sum(answer.allowed for answer in answers), took

    admitted, took = asyncio.run(scenario())
    # the bucket's 100, plus what a continuous 100/min refills while the burst runs (none
    # when it takes under 0.6 s; a loaded CI machine takes longer), and not one more
    refilled = int(took * 100 / 60)
    assert 100 <= admitted <= 100 + refilled, (admitted, took)


def test_deployment_refusal_rolls_back_the_tenant_slot(cluster: RedisCluster3) -> None:
    async def scenario() -> None:
        store = await RedisLimitStore.open(cluster.url, timeout_seconds=5)
        try:
            started = time.monotonic()
            answers = [
                await store.admit(
                    plan(
                        request_limits(
                            f"dep-{n}", "rollback", deployment_rpm=3, deployment_id="small"
                        )
                    )
                )
                for n in range(8)
            ]
            assert [a.allowed for a in answers] == [True] * 3 + [False] * 5
            assert answers[-1].refused_scope == "deployment small"
            # the five refused requests took nothing from the tenant's key bucket, its
            # leases or its budget: only the three admitted ones count
            probe = await store.admit(
                plan(request_limits("probe", "rollback", deployment_id="roomy"))
            )
            assert probe.allowed
            assert probe.requests is not None
            key_state = probe.requests
            assert key_state.scope == "key k1"
            # 100 a minute: the bucket refills while the nine calls run (on a busy
            # machine, seconds); five more taken would leave it at most 91 plus that
            refilled = (time.monotonic() - started) * 100 / 60
            assert 100 - 4 - 0.01 <= key_state.remaining <= 100 - 4 + refilled + 0.01
            assert refilled < 4, "the calls took too long to tell four taken from nine"
            assert probe.budgets[0].used_micros == 4 * 10_000
        finally:
            await store.close()

    asyncio.run(scenario())


def test_settlement_and_release_work_across_slots(cluster: RedisCluster3) -> None:
    async def scenario() -> None:
        store = await RedisLimitStore.open(cluster.url, timeout_seconds=5)
        try:
            request = plan(request_limits("settle-1", "settle"))
            answer = await store.admit(request)
            assert answer.allowed and len(answer.leases) == 1
            settled = settlement_for(
                request, answer, actual_tokens=100, actual_cost_usd=Decimal("0.002")
            )
            assert await store.settle(settled)
            assert not await store.settle(settled)
            await store.release(answer.leases)
            probe = await store.admit(plan(request_limits("settle-2", "settle")))
            assert probe.budgets[0].used_micros == 2_000 + 10_000
            assert probe.tokens is not None
            # tenant bucket: 1,000,000 - 100 settled - 500 reserved by the probe
            tenant_tokens = probe.tokens
            assert tenant_tokens.remaining == pytest.approx(1_000_000 - 600, abs=50)
        finally:
            await store.close()
        with redis.Redis(port=cluster.nodes[0].port) as node:
            assert node.ping()

    asyncio.run(scenario())
