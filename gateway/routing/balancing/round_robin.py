"""Round robin: each eligible replica in turn, blind to load and prefix.

The baseline the other policies are measured against. The counter advances once per
choice and indexes the replicas eligible at that moment, so a replica that drops out
(full, unhealthy) is skipped without stalling the rotation.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.balancing.base import BalanceRequest, ReplicaView, eligible


class RoundRobin:
    def __init__(self) -> None:
        self._turn = 0

    @property
    def name(self) -> str:
        return "round_robin"

    def select(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> int | None:
        candidates = eligible(replicas)
        if not candidates:
            return None
        choice = candidates[self._turn % len(candidates)]
        self._turn += 1
        return choice

    def preference(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> list[int]:
        return []
