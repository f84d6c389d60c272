from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator

import httpx
import pytest

from gateway.errors import Overloaded, UpstreamUnavailable
from gateway.pools import DEFAULT_MAX_IN_FLIGHT, ReplicaAddress, ReplicaPool, max_in_flight
from gateway.pools.monitor import UNHEALTHY_AFTER
from gateway.routing.balancing import BalanceRequest
from gateway.routing.balancing.prefix_affinity import rendezvous_order
from gateway.settings.server import BreakerSettings, ProviderSettings, ReplicaPoolSettings
from tests.pools.replica_server import TinyReplica


@pytest.fixture
def replica() -> Iterator[TinyReplica]:
    server = TinyReplica().start()
    yield server
    server.stop()


@pytest.fixture
def second_replica() -> Iterator[TinyReplica]:
    server = TinyReplica().start()
    yield server
    server.stop()


def closed_port_url() -> str:
    """A URL where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def settings(urls: list[str], **overrides: object) -> ReplicaPoolSettings:
    values: dict[str, object] = {
        "urls": urls,
        "balancer": "least_load",
        "max_inflight_per_replica": 1,
        "queue_size": 8,
        "queue_timeout_ms": 5_000,
        "scrape_interval_seconds": 30,
    }
    values.update(overrides)
    return ReplicaPoolSettings.model_validate(values)


async def eventually(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


def by(tenant: str) -> BalanceRequest:
    return BalanceRequest(tenant=tenant)


def test_max_in_flight_defaults_by_gpu_class_and_can_be_overridden() -> None:
    urls = ["http://gpu:30000/v1"]
    assert DEFAULT_MAX_IN_FLIGHT == {"v100": 10, "a100": 20, "h100": 40}
    assert max_in_flight(ReplicaPoolSettings(urls=urls, gpu_class="h100")) == 40
    assert max_in_flight(ReplicaPoolSettings(urls=urls, gpu_class="v100")) == 10
    explicit = ReplicaPoolSettings(urls=urls, gpu_class="h100", max_inflight_per_replica=7)
    assert max_in_flight(explicit) == 7


def test_replica_urls_are_openai_bases_and_probes_go_to_the_root() -> None:
    with_v1 = ReplicaAddress.parse("http://gpu-1:30000/v1/")
    bare = ReplicaAddress.parse("http://gpu-1:30000")
    assert with_v1 == bare
    assert bare.base_url == "http://gpu-1:30000/v1"
    assert bare.at_root("/health") == "http://gpu-1:30000/health"
    with pytest.raises(ValueError, match="http://host:port/v1"):
        ReplicaAddress.parse("gpu-1:30000")


def test_a_full_pool_queues_then_refuses_when_the_queue_is_full(replica: TinyReplica) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url], queue_size=2))
        await pool.start()
        try:
            held = await pool.acquire(by("a"))
            waiters = [asyncio.create_task(pool.acquire(by("a"))) for _ in range(2)]
            await asyncio.sleep(0)
            assert pool.waiting == 2
            with pytest.raises(Overloaded, match="2 requests are already waiting") as refused:
                await pool.acquire(by("a"))
            assert refused.value.status == 503
            assert refused.value.retryable
            held.release()
            first = await waiters[0]
            assert first.url == replica.base_url
            first.release()
            (await waiters[1]).release()
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_a_waiter_times_out_with_overloaded_and_leaves_the_queue(replica: TinyReplica) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url], queue_timeout_ms=50))
        await pool.start()
        try:
            held = await pool.acquire(by("a"))
            with pytest.raises(Overloaded, match=r"no replica freed a slot within 0\.05 s"):
                await pool.acquire(by("b"))
            with pytest.raises(Overloaded, match=r"within 0\.01 s"):
                await pool.acquire(by("b"), queue_timeout=0.01)
            assert pool.waiting == 0
            held.release()
            (await pool.acquire(by("b"))).release()
            assert pool.replicas[0].in_flight == 0
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_freed_slots_go_to_tenants_in_turn(replica: TinyReplica) -> None:
    async def scenario() -> list[str]:
        pool = ReplicaPool("llama", settings([replica.base_url]))
        served: list[str] = []

        async def request(tenant: str) -> None:
            lease = await pool.acquire(by(tenant))
            served.append(tenant)
            await asyncio.sleep(0.001)
            lease.release()

        await pool.start()
        try:
            held = await pool.acquire(by("first"))
            heavy = [asyncio.create_task(request("heavy")) for _ in range(5)]
            await asyncio.sleep(0)
            light = [asyncio.create_task(request("light")) for _ in range(2)]
            await asyncio.sleep(0)
            held.release()
            await asyncio.gather(*heavy, *light)
        finally:
            await pool.stop()
        return served

    served = asyncio.run(scenario())
    assert served == ["heavy", "light", "heavy", "light", "heavy", "heavy", "heavy"]


def test_a_tenant_flooding_the_queue_gives_way_to_another(replica: TinyReplica) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url], queue_size=3))
        await pool.start()
        try:
            held = await pool.acquire(by("first"))
            flood = [asyncio.create_task(pool.acquire(by("heavy"))) for _ in range(3)]
            await asyncio.sleep(0)
            newcomer = asyncio.create_task(pool.acquire(by("light")))
            await asyncio.sleep(0)
            assert pool.waiting == 3
            with pytest.raises(Overloaded, match="'heavy' holds more than its fair share"):
                await flood[2]
            held.release()
            for task in (flood[0], newcomer, flood[1]):
                (await task).release()
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_cancelling_a_request_mid_flight_gives_its_slot_back(replica: TinyReplica) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url]))
        await pool.start()
        async with httpx.AsyncClient() as client:

            async def call_upstream() -> None:
                async with await pool.acquire(by("a")) as lease:
                    await client.post(f"{lease.url}/chat/completions", json={})

            try:
                task = asyncio.create_task(call_upstream())
                await eventually(lambda: replica.chat_requests > 0)
                assert pool.replicas[0].in_flight == 1
                waiting = asyncio.create_task(pool.acquire(by("b")))
                await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                lease = await asyncio.wait_for(waiting, 5)
                assert pool.replicas[0].in_flight == 1
                lease.release()
                lease.release()  # idempotent
                assert pool.replicas[0].in_flight == 0
            finally:
                await pool.stop()

    asyncio.run(scenario())


def test_cancelling_a_waiter_removes_it_from_the_queue(replica: TinyReplica) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url]))
        await pool.start()
        try:
            held = await pool.acquire(by("a"))
            waiter = asyncio.create_task(pool.acquire(by("b")))
            await asyncio.sleep(0)
            assert pool.waiting == 1
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert pool.waiting == 0
            held.release()
            assert pool.replicas[0].in_flight == 0
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_a_waiter_cancelled_just_after_being_handed_a_slot_passes_it_on(
    replica: TinyReplica,
) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url]))
        await pool.start()
        try:
            held = await pool.acquire(by("a"))
            unlucky = asyncio.create_task(pool.acquire(by("b")))
            patient = asyncio.create_task(pool.acquire(by("c")))
            await asyncio.sleep(0)
            held.release()  # hands the slot to `unlucky` before it runs again
            unlucky.cancel()
            with pytest.raises(asyncio.CancelledError):
                await unlucky
            lease = await asyncio.wait_for(patient, 5)
            assert pool.replicas[0].in_flight == 1
            lease.release()
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_health_checks_mark_a_dead_replica_unhealthy_and_skip_it(replica: TinyReplica) -> None:
    async def scenario() -> None:
        dead = closed_port_url()
        pool = ReplicaPool("llama", settings([dead, replica.base_url], max_inflight_per_replica=10))
        await pool.start()
        try:
            for _ in range(UNHEALTHY_AFTER - 1):
                await pool.check_now()
            assert [r.healthy for r in pool.replicas] == [False, True]
            for _ in range(6):
                lease = await pool.acquire(by("a"))
                assert lease.url == replica.base_url
                lease.release()
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_a_replica_answering_503_on_health_recovers_after_one_good_check(
    replica: TinyReplica,
) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url]))
        try:
            replica.healthy = False
            for _ in range(UNHEALTHY_AFTER):
                await pool.check_now()
            assert not pool.replicas[0].healthy
            with pytest.raises(UpstreamUnavailable, match="none of its 1 replicas is up"):
                await pool.acquire(by("a"))
            replica.healthy = True
            await pool.check_now()
            assert pool.replicas[0].healthy
            (await pool.acquire(by("a"))).release()
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_the_scrape_feeds_queue_depth_and_kv_usage_to_the_balancer(
    replica: TinyReplica, second_replica: TinyReplica
) -> None:
    async def scenario() -> None:
        replica.queued, replica.running, replica.kv_usage = 12, 30, 0.8
        pool = ReplicaPool(
            "llama",
            settings([replica.base_url, second_replica.base_url], max_inflight_per_replica=10),
        )
        await pool.start()
        try:
            busy, idle = pool.views()
            assert (busy.queue_depth, busy.running, busy.kv_usage) == (12, 30, 0.8)
            assert idle.queue_depth == 0
            leases = [await pool.acquire(by("a")) for _ in range(10)]
            assert {lease.url for lease in leases} == {second_replica.base_url}
            for lease in leases:
                lease.release()
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_failures_open_a_replicas_breaker_and_traffic_moves_away(
    replica: TinyReplica, second_replica: TinyReplica
) -> None:
    async def scenario() -> None:
        provider = ProviderSettings(
            kind="openai",
            breaker=BreakerSettings(failure_threshold=3, open_seconds=60),
            replicas=settings(
                [replica.base_url, second_replica.base_url],
                balancer="round_robin",
                max_inflight_per_replica=10,
            ),
        )
        pool = ReplicaPool.from_provider("llama", provider)
        try:
            failing = replica.base_url
            for _ in range(3):
                while (lease := await pool.acquire(by("a"))).url != failing:
                    lease.release()
                pool.record_result(lease, ok=False)
                lease.release()
            assert pool.views()[0].breaker_open
            urls = set()
            for _ in range(6):
                async with await pool.acquire(by("a")) as lease:
                    urls.add(lease.url)
                    pool.record_result(lease, ok=True)
            assert urls == {second_replica.base_url}
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_a_provider_without_replicas_is_not_a_pool() -> None:
    with pytest.raises(ValueError, match="not a GPU pool"):
        ReplicaPool.from_provider(
            "openai", ProviderSettings(kind="openai", base_url="http://127.0.0.1:1/v1")
        )


def test_a_freed_slot_goes_to_a_waiter_that_wants_that_replica(
    replica: TinyReplica, second_replica: TinyReplica
) -> None:
    urls = [replica.base_url, second_replica.base_url]

    def wanting(index: int, tenant: str) -> BalanceRequest:
        key = next(k for k in range(1000) if rendezvous_order(k, urls)[0] == index)
        return BalanceRequest(prefix_hashes=(key,), tenant=tenant)

    async def scenario() -> None:
        pool = ReplicaPool("llama", settings(urls, balancer="prefix_affinity"))
        await pool.start()
        try:
            first = await pool.acquire(wanting(0, "a"))
            second = await pool.acquire(wanting(1, "a"))
            assert (first.url, second.url) == (replica.base_url, second_replica.base_url)
            wants_second = asyncio.create_task(pool.acquire(wanting(1, "b")))
            await asyncio.sleep(0)
            wants_first = asyncio.create_task(pool.acquire(wanting(0, "c")))
            await asyncio.sleep(0)
            first.release()  # the older waiter wants the other replica: it keeps waiting
            lease = await asyncio.wait_for(wants_first, 5)
            assert lease.url == replica.base_url
            assert not wants_second.done()
            second.release()
            assert (await asyncio.wait_for(wants_second, 5)).url == second_replica.base_url
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_a_freed_slot_nobody_wants_goes_to_the_next_waiter(
    replica: TinyReplica, second_replica: TinyReplica
) -> None:
    urls = [replica.base_url, second_replica.base_url]
    key = next(k for k in range(1000) if rendezvous_order(k, urls)[0] == 1)

    async def scenario() -> None:
        pool = ReplicaPool("llama", settings(urls, balancer="prefix_affinity"))
        await pool.start()
        try:
            held = [await pool.acquire(BalanceRequest()) for _ in range(2)]
            waiter = asyncio.create_task(pool.acquire(BalanceRequest(prefix_hashes=(key,))))
            await asyncio.sleep(0)
            spare = next(lease for lease in held if lease.url == replica.base_url)
            spare.release()  # the waiter wants the other replica, but nobody wants this one
            assert (await asyncio.wait_for(waiter, 5)).url == replica.base_url
        finally:
            await pool.stop()

    asyncio.run(scenario())


def test_without_a_queue_a_full_pool_refuses_at_once(replica: TinyReplica) -> None:
    async def scenario() -> None:
        pool = ReplicaPool("llama", settings([replica.base_url], queue_size=0))
        await pool.start()
        try:
            held = await pool.acquire(by("a"))
            with pytest.raises(Overloaded, match=r"queueing is off \(queue_size 0\)"):
                await pool.acquire(by("a"))
            held.release()
        finally:
            await pool.stop()

    asyncio.run(scenario())
