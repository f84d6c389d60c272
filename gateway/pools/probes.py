"""The requests the pool sends a replica on its own: a health check and a load scrape
(`/metrics`, plus `/slots` for llama-server)."""

from __future__ import annotations

import asyncio

from gateway.errors import GatewayError
from gateway.pools.address import ReplicaAddress
from gateway.pools.llamacpp_slots import SlotsPage, parse_slots, with_slots
from gateway.pools.scraped import MetricsStyle, ScrapedLoad, parse_metrics
from gateway.providers.base import ProviderClient, UpstreamRequest


class ReplicaProbe:
    """The pool's own GETs (health, `/metrics`, `/slots`), sent like its traffic: through
    the transport seam's client for the pool's provider."""

    def __init__(self, client: ProviderClient) -> None:
        self._client = client

    async def get(self, url: str, within_seconds: float) -> tuple[int, bytes] | None:
        """Status and body, or None when no whole answer came within `within_seconds`."""
        try:
            async with asyncio.timeout(within_seconds):
                response = await self._client.send(UpstreamRequest(url=url, body=b"", method="GET"))
                return response.status, await response.read()
        except (GatewayError, TimeoutError, OSError):
            return None

    async def close(self) -> None:
        await self._client.close()


async def check_health(probe: ReplicaProbe, url: str, probe_timeout: float) -> bool:
    """True when `url` answers 2xx within `probe_timeout` seconds; any failure is False."""
    answer = await probe.get(url, probe_timeout)
    return answer is not None and 200 <= answer[0] < 300


async def scrape_replica(
    probe: ReplicaProbe, address: ReplicaAddress, style: MetricsStyle, probe_timeout: float
) -> ScrapedLoad | None:
    """The replica's load, or None when its `/metrics` cannot be read. For llama-server
    its `/slots` page is read at the same time; without it (`--no-slots`) the load lacks
    the slot count and KV use."""
    metrics_url = address.at_root("/metrics")
    if style != "llamacpp":
        return await scrape_load(probe, metrics_url, style, probe_timeout)
    load, slots = await asyncio.gather(
        scrape_load(probe, metrics_url, style, probe_timeout),
        scrape_slots(probe, address.at_root("/slots"), probe_timeout),
    )
    return None if load is None else with_slots(load, slots)


async def scrape_load(
    probe: ReplicaProbe, url: str, style: MetricsStyle, probe_timeout: float
) -> ScrapedLoad | None:
    """The replica's load from its `/metrics` page, or None when it cannot be read."""
    answer = await probe.get(url, probe_timeout)
    if answer is None or not 200 <= answer[0] < 300:
        return None
    try:
        return parse_metrics(answer[1].decode("utf-8", "replace"), style)
    except ValueError:
        return None


async def scrape_slots(probe: ReplicaProbe, url: str, probe_timeout: float) -> SlotsPage | None:
    """llama-server's `/slots` page, or None when it cannot be read."""
    answer = await probe.get(url, probe_timeout)
    if answer is None or not 200 <= answer[0] < 300:
        return None
    try:
        return parse_slots(answer[1])
    except ValueError:
        return None
