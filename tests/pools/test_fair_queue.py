from __future__ import annotations

import asyncio

import pytest

from gateway.pools.fair_queue import FairQueue, QueueFull, Waiter


def test_waiters_are_served_round_robin_across_tenants_and_fifo_within() -> None:
    async def scenario() -> None:
        queue: FairQueue[str] = FairQueue(capacity=10)
        for name in ("a1", "a2", "a3", "b1", "c1", "c2"):
            queue.push(Waiter(name[0], name))
        served = []
        while (waiter := queue.pop()) is not None:
            served.append(waiter.payload)
        assert served == ["a1", "b1", "c1", "a2", "c2", "a3"]
        assert len(queue) == 0

    asyncio.run(scenario())


def test_a_full_queue_refuses_the_tenant_that_already_has_the_most() -> None:
    async def scenario() -> None:
        queue: FairQueue[str] = FairQueue(capacity=2)
        queue.push(Waiter("a", "a1"))
        queue.push(Waiter("b", "b1"))
        with pytest.raises(QueueFull):
            queue.push(Waiter("a", "a2"))
        with pytest.raises(QueueFull):
            queue.push(Waiter("c", "c1"))  # nobody holds more than one: no one to displace
        assert len(queue) == 2

    asyncio.run(scenario())


def test_a_newcomer_displaces_the_newest_waiter_of_the_longest_line() -> None:
    async def scenario() -> None:
        queue: FairQueue[str] = FairQueue(capacity=3)
        for name in ("a1", "a2", "a3"):
            queue.push(Waiter("a", name))
        displaced = queue.push(Waiter("b", "b1"))
        assert displaced is not None and displaced.payload == "a3"
        assert len(queue) == 3
        assert queue.waiting("a") == 2 and queue.waiting("b") == 1

    asyncio.run(scenario())


def test_pop_first_takes_the_first_wanted_waiter_in_service_order() -> None:
    async def scenario() -> None:
        queue: FairQueue[str] = FairQueue(capacity=10)
        for name in ("a-x", "a-y", "b-y", "c-x"):
            queue.push(Waiter(name[0], name))
        wanted = queue.pop_first(lambda w: w.payload.endswith("y"), max_scan=10)
        assert wanted is not None and wanted.payload == "a-y"
        # tenant a was served, so it moved to the back of the rotation
        assert [queue.pop().payload for _ in range(3)] == ["b-y", "c-x", "a-x"]  # type: ignore[union-attr]
        assert queue.pop_first(lambda w: True, max_scan=10) is None

    asyncio.run(scenario())


def test_pop_first_looks_no_deeper_than_max_scan() -> None:
    async def scenario() -> None:
        queue: FairQueue[str] = FairQueue(capacity=10)
        for name in ("a1", "a2", "a3"):
            queue.push(Waiter("a", name))
        assert queue.pop_first(lambda w: w.payload == "a3", max_scan=2) is None
        assert queue.pop_first(lambda w: w.payload == "a3", max_scan=3) is not None

    asyncio.run(scenario())


def test_discard_removes_a_waiter_once() -> None:
    async def scenario() -> None:
        queue: FairQueue[str] = FairQueue(capacity=10)
        first, second = Waiter("a", "a1"), Waiter("a", "a2")
        queue.push(first)
        queue.push(second)
        queue.discard(first)
        queue.discard(first)
        assert len(queue) == 1
        assert queue.pop() is second

    asyncio.run(scenario())
