"""The waiting line in front of a full pool: bounded, one FIFO per tenant, served in turn.

When every replica is at its in-flight limit, requests wait here. Two rules keep one busy
tenant from starving the others:
- service: a freed slot goes to the next tenant in rotation (round robin over the
  tenants that have someone waiting), and within a tenant to its oldest request; the
  pool may ask for the first waiter, in that order, that wants a given replica;
- admission: when the line is full, a newcomer whose tenant waits with fewer requests than
  the longest tenant's takes the place of that tenant's newest request, which is refused.
  Otherwise the newcomer is refused. So a tenant that floods the line cannot lock out a
  tenant that sends one request.

The queue only orders waiters; the pool decides when a slot is free and completes the
waiter's future with the chosen replica.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Payload = TypeVar("Payload")


@dataclass(eq=False)
class Waiter(Generic[Payload]):
    tenant: str
    payload: Payload
    future: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class QueueFull(Exception):
    """The line is full and the newcomer's tenant already has its fair share of it."""


class FairQueue(Generic[Payload]):
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        # tenant -> its waiters, oldest first; the dict's order is the service rotation
        self._lines: OrderedDict[str, deque[Waiter[Payload]]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._capacity

    def push(self, waiter: Waiter[Payload]) -> Waiter[Payload] | None:
        """Queue `waiter`; returns the waiter it displaced, or raises QueueFull.

        The caller must refuse the displaced waiter (complete its future with an error).
        """
        displaced: Waiter[Payload] | None = None
        if self._size >= self._capacity:
            displaced = self._displace_for(waiter.tenant)
        self._lines.setdefault(waiter.tenant, deque()).append(waiter)
        self._size += 1
        return displaced

    def pop(self) -> Waiter[Payload] | None:
        """The next waiter in tenant rotation, or None when nobody waits."""
        if not self._lines:
            return None
        tenant, line = next(iter(self._lines.items()))
        waiter = line.popleft()
        self._size -= 1
        del self._lines[tenant]
        if line:
            self._lines[tenant] = line  # back of the rotation
        return waiter

    def pop_first(
        self, wanted: Callable[[Waiter[Payload]], bool], max_scan: int
    ) -> Waiter[Payload] | None:
        """The first waiter `wanted` accepts, looking in service order (tenants in
        rotation, each oldest first) at no more than `max_scan` waiters; None if none."""
        scanned = 0
        for tenant, line in self._lines.items():
            for waiter in line:
                if scanned >= max_scan:
                    return None
                scanned += 1
                if wanted(waiter):
                    line.remove(waiter)
                    self._size -= 1
                    del self._lines[tenant]
                    if line:
                        self._lines[tenant] = line
                    return waiter
        return None

    def discard(self, waiter: Waiter[Payload]) -> None:
        """Remove a waiter that gave up (timeout, cancellation); no-op if already gone."""
        line = self._lines.get(waiter.tenant)
        if line is None or waiter not in line:
            return
        line.remove(waiter)
        self._size -= 1
        if not line:
            del self._lines[waiter.tenant]

    def waiting(self, tenant: str) -> int:
        line = self._lines.get(tenant)
        return len(line) if line else 0

    def _displace_for(self, tenant: str) -> Waiter[Payload]:
        if not self._lines:
            raise QueueFull
        longest = max(self._lines, key=lambda name: len(self._lines[name]))
        if len(self._lines[longest]) <= self.waiting(tenant) + 1:
            raise QueueFull
        line = self._lines[longest]
        displaced = line.pop()
        self._size -= 1
        if not line:
            del self._lines[longest]
        return displaced
