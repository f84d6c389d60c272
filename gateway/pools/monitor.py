"""The pool's background loop: health checks and `/metrics` scrapes of every replica.

Both run every `scrape_interval_seconds`, all replicas at once. A replica is marked
unhealthy after `UNHEALTHY_AFTER` failed checks in a row (one slow answer under load is
not a dead server) and healthy again after one good check. A failed scrape keeps the
last reading: a replica too busy to answer `/metrics` must not look idle. A replica that
says how many requests it runs at once (llama-server's slots) gets that as its in-flight
cap, unless the pool sets `max_inflight_per_replica`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from gateway.pools.probes import ReplicaProbe, check_health, scrape_replica
from gateway.pools.replica import Replica
from gateway.settings.server import ReplicaPoolSettings

logger = logging.getLogger(__name__)

UNHEALTHY_AFTER = 2
# a probe may take up to one interval, within these bounds
MIN_PROBE_TIMEOUT = 1.0
MAX_PROBE_TIMEOUT = 5.0


class PoolMonitor:
    def __init__(
        self,
        replicas: Sequence[Replica],
        settings: ReplicaPoolSettings,
        probe: ReplicaProbe,
        on_change: Callable[[], None],
    ) -> None:
        self._replicas = replicas
        self._settings = settings
        self._probe = probe
        self._on_change = on_change
        self._timeout = min(
            MAX_PROBE_TIMEOUT, max(MIN_PROBE_TIMEOUT, settings.scrape_interval_seconds)
        )

    async def run(self) -> None:
        """Check every interval, forever (the first check after one interval); cancel the
        task to stop. A failed round is logged and the loop goes on: a pool whose checks
        stopped would keep trusting stale health."""
        while True:
            await asyncio.sleep(self._settings.scrape_interval_seconds)
            try:
                await self.check_once()
            except Exception:
                logger.exception("health check round failed; retrying next interval")

    async def check_once(self) -> None:
        await asyncio.gather(*(self._check(replica) for replica in self._replicas))
        self._on_change()

    async def _check(self, replica: Replica) -> None:
        health_url = replica.address.at_root(self._settings.health_path)
        style = self._settings.metrics_style
        if style == "none":
            healthy = await check_health(self._probe, health_url, self._timeout)
        else:
            healthy, scraped = await asyncio.gather(
                check_health(self._probe, health_url, self._timeout),
                scrape_replica(self._probe, replica.address, style, self._timeout),
            )
            if scraped is not None:
                replica.scraped = scraped
                if scraped.slots and self._settings.max_inflight_per_replica is None:
                    replica.max_in_flight = scraped.slots
        if healthy:
            replica.consecutive_health_failures = 0
            replica.healthy = True
        else:
            replica.consecutive_health_failures += 1
            if replica.consecutive_health_failures >= UNHEALTHY_AFTER:
                replica.healthy = False
