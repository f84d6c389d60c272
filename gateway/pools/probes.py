"""The two requests the pool sends a replica on its own: a health check and a scrape."""

from __future__ import annotations

import httpx

from gateway.pools.scraped import MetricsStyle, ScrapedLoad, parse_metrics


async def check_health(client: httpx.AsyncClient, url: str, probe_timeout: float) -> bool:
    """True when `url` answers 2xx within `probe_timeout` seconds; any failure is False."""
    try:
        response = await client.get(url, timeout=probe_timeout)
    except httpx.HTTPError:
        return False
    return response.is_success


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
