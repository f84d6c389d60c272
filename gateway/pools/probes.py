"""The requests the pool sends a replica on its own: a health check and a load scrape
(`/metrics`, plus `/slots` for llama-server)."""

from __future__ import annotations

import asyncio

import httpx

from gateway.pools.address import ReplicaAddress
from gateway.pools.llamacpp_slots import SlotsPage, parse_slots, with_slots
from gateway.pools.scraped import MetricsStyle, ScrapedLoad, parse_metrics


async def check_health(client: httpx.AsyncClient, url: str, probe_timeout: float) -> bool:
    """True when `url` answers 2xx within `probe_timeout` seconds; any failure is False."""
    try:
        response = await client.get(url, timeout=probe_timeout)
    except httpx.HTTPError:
        return False
    return response.is_success


async def scrape_replica(
    client: httpx.AsyncClient, address: ReplicaAddress, style: MetricsStyle, probe_timeout: float
) -> ScrapedLoad | None:
    """The replica's load, or None when its `/metrics` cannot be read. For llama-server
    its `/slots` page is read at the same time; without it (`--no-slots`) the load lacks
    the slot count and KV use."""
    metrics_url = address.at_root("/metrics")
    if style != "llamacpp":
        return await scrape_load(client, metrics_url, style, probe_timeout)
    load, slots = await asyncio.gather(
        scrape_load(client, metrics_url, style, probe_timeout),
        scrape_slots(client, address.at_root("/slots"), probe_timeout),
    )
    return None if load is None else with_slots(load, slots)


async def scrape_load(
    client: httpx.AsyncClient, url: str, style: MetricsStyle, probe_timeout: float
) -> ScrapedLoad | None:
    """The replica's load from its `/metrics` page, or None when it cannot be read."""
    try:
        response = await client.get(url, timeout=probe_timeout)
    except httpx.HTTPError:
        return None
    if not response.is_success:
        return None
    try:
        return parse_metrics(response.text, style)
    except ValueError:
        return None


async def scrape_slots(
    client: httpx.AsyncClient, url: str, probe_timeout: float
) -> SlotsPage | None:
    """llama-server's `/slots` page, or None when it cannot be read."""
    try:
        response = await client.get(url, timeout=probe_timeout)
    except httpx.HTTPError:
        return None
    if not response.is_success:
        return None
    try:
        return parse_slots(response.content)
    except ValueError:
        return None
