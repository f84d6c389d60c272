"""Replica choice for GPU pools: one Protocol, one module per policy, one factory."""

from gateway.routing.balancing.base import Balancer, BalanceRequest, ReplicaView, eligible
from gateway.routing.balancing.factory import build_balancer
from gateway.routing.balancing.least_load import LeastLoad
from gateway.routing.balancing.prefix import balance_request
from gateway.routing.balancing.prefix_affinity import BoundedLoad, PrefixAffinity
from gateway.routing.balancing.round_robin import RoundRobin

__all__ = [
    "BalanceRequest",
    "Balancer",
    "BoundedLoad",
    "LeastLoad",
    "PrefixAffinity",
    "ReplicaView",
    "RoundRobin",
    "balance_request",
    "build_balancer",
    "eligible",
]
