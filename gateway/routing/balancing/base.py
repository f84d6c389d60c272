"""The balancer contract: pick one replica of a GPU pool for one request.

A balancer is a pure function of two snapshots, the replicas as the pool sees them now
(:class:`ReplicaView`) and what the request offers for placement (:class:`BalanceRequest`),
plus whatever small private state the policy keeps (a round-robin counter). It never does
I/O and never blocks: the pool runtime (`gateway.pools`) counts in-flight requests,
scrapes `/metrics`, runs health checks and queues requests when every replica is full.

Every policy starts from :func:`eligible`, which drops the replicas nobody should get
(unhealthy, circuit open, at their in-flight limit) before the policy looks at the rest,
so no policy can send traffic to a dead replica by mistake.

Policies that care where a request lands (prefix affinity) also say which replicas a
request would rather have (:meth:`Balancer.preference`), so that the pool's queue can
hand a freed slot to a waiter that wants it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the pool sees it at selection time.

    `url` is the replica's identity: the same string in every gateway's config, which is
    what lets hash-based policies agree across gateways. `in_flight` counts this gateway's
    requests at the replica; `queue_depth`, `running` and `kv_usage` come from the last
    `/metrics` scrape (zero when the pool does not scrape) and so include every gateway's
    traffic, a few seconds late.
    """

    url: str
    in_flight: int = 0
    max_in_flight: int = 1
    healthy: bool = True
    breaker_open: bool = False
    queue_depth: int = 0
    running: int = 0
    # fraction of the KV cache held by running requests, 0..1
    kv_usage: float = 0.0

    @property
    def load(self) -> int:
        """Requests ahead of a new one: ours in flight plus the replica's own queue."""
        return self.in_flight + self.queue_depth

    @property
    def full(self) -> bool:
        return self.in_flight >= self.max_in_flight


@dataclass(frozen=True, slots=True)
class BalanceRequest:
    """What a request offers the balancer: its prompt prefix and who sent it.

    `prefix_hashes[i]` identifies the first i+1 blocks of the rendered prompt (each hash
    chains the previous one), and `anchor` is the index of the deepest block that still
    lies inside the prompt's stable head (tools and system prompt, or the first user turn
    when there is no system prompt). Requests that share a head share
    `prefix_hashes[anchor]`, whatever follows. Build one with
    `gateway.routing.balancing.prefix.balance_request`.
    """

    prefix_hashes: tuple[int, ...] = ()
    anchor: int = 0
    tenant: str | None = None

    @property
    def routing_key(self) -> int | None:
        """The hash that prefix-aware policies place by, or None without a prompt."""
        if not self.prefix_hashes:
            return None
        return self.prefix_hashes[min(self.anchor, len(self.prefix_hashes) - 1)]


class Balancer(Protocol):
    """Chooses a replica; returns its index in `replicas`, or None if none is eligible."""

    @property
    def name(self) -> str:
        """Labels metrics and logs: `round_robin`, `least_load`, `prefix_affinity`."""
        ...

    def select(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> int | None: ...

    def preference(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> list[int]:
        """Indices of all `replicas`, most wanted first, ignoring load and health; empty
        when any replica will do (round robin, least load).

        The pool uses it when every replica is full and requests wait: a slot freed on a
        replica goes first to a waiter that wants that replica, so a queue does not
        scatter prefixes.
        """
        ...


def eligible(replicas: Sequence[ReplicaView]) -> list[int]:
    """Indices of the replicas a policy may choose: healthy, circuit closed, not full."""
    return [
        index
        for index, replica in enumerate(replicas)
        if replica.healthy and not replica.breaker_open and not replica.full
    ]
