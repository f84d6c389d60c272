"""Least load: the replica with the fewest requests ahead of a new one.

Load is this gateway's in-flight requests at the replica plus the replica's own waiting
queue from the last `/metrics` scrape (which counts other gateways' traffic too). Ties go
to the replica with the emptier KV cache (fewer preemptions ahead), then rotate, so an
idle pool is not always served by its first replica.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.balancing.base import BalanceRequest, ReplicaView, eligible


class LeastLoad:
    def __init__(self) -> None:
        self._turn = 0

    @property
    def name(self) -> str:
        return "least_load"

    def select(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> int | None:
        candidates = eligible(replicas)
        if not candidates:
            return None
        self._turn += 1
        offset = self._turn % len(candidates)
        rotated = candidates[offset:] + candidates[:offset]
        return min(rotated, key=lambda index: (replicas[index].load, replicas[index].kv_usage))

    def preference(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> list[int]:
        return []
