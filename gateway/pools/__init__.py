"""GPU pools at run time: per-replica in-flight limits, the fair waiting queue, health
checks and `/metrics` scrapes around a balancer from `gateway.routing.balancing`."""

from gateway.pools.address import ReplicaAddress
from gateway.pools.capacity import DEFAULT_MAX_IN_FLIGHT, max_in_flight
from gateway.pools.lease import ReplicaLease
from gateway.pools.pool import ReplicaPool
from gateway.pools.scraped import ScrapedLoad, parse_metrics

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "ReplicaAddress",
    "ReplicaLease",
    "ReplicaPool",
    "ScrapedLoad",
    "max_in_flight",
    "parse_metrics",
]
