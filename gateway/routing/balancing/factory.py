"""Builds the balancer a pool's settings name; the one place that maps names to classes."""

from __future__ import annotations

from gateway.routing.balancing.base import Balancer
from gateway.routing.balancing.least_load import LeastLoad
from gateway.routing.balancing.prefix_affinity import BoundedLoad, PrefixAffinity
from gateway.routing.balancing.round_robin import RoundRobin
from gateway.settings.server import ReplicaPoolSettings


def build_balancer(settings: ReplicaPoolSettings, bounds: BoundedLoad | None = None) -> Balancer:
    """A fresh balancer (own state) for one pool; `bounds` tunes prefix_affinity."""
    match settings.balancer:
        case "round_robin":
            return RoundRobin()
        case "least_load":
            return LeastLoad()
        case "prefix_affinity":
            return PrefixAffinity(
                bounds
                or BoundedLoad(
                    abs_threshold=settings.balance_abs_threshold,
                    rel_threshold=settings.balance_rel_threshold,
                    kv_threshold=settings.balance_kv_threshold,
                )
            )
