"""One replica's live state in this gateway: in-flight count, health, last scrape."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.pools.address import ReplicaAddress
from gateway.pools.scraped import ScrapedLoad
from gateway.resilience.breaker import CircuitBreaker
from gateway.routing.balancing.base import ReplicaView


@dataclass(eq=False)
class Replica:
    address: ReplicaAddress
    max_in_flight: int
    breaker: CircuitBreaker
    in_flight: int = 0
    # optimistic until the first health check says otherwise: a pool serves at once
    healthy: bool = True
    consecutive_health_failures: int = 0
    scraped: ScrapedLoad = field(default_factory=ScrapedLoad)

    @property
    def url(self) -> str:
        return self.address.base_url

    def view(self) -> ReplicaView:
        return ReplicaView(
            url=self.address.base_url,
            in_flight=self.in_flight,
            max_in_flight=self.max_in_flight,
            healthy=self.healthy,
            breaker_open=not self.breaker.would_allow(),
            queue_depth=self.scraped.queued,
            running=self.scraped.running,
            kv_usage=self.scraped.kv_usage,
        )

    @property
    def up(self) -> bool:
        """Healthy and its circuit lets requests through, full or not."""
        return self.healthy and self.breaker.would_allow()
