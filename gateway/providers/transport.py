"""The one way out of the gateway, and the mapping of network errors into our error tree
where they enter.

Everything above this module sees one seam: :meth:`Transport.send` takes an
:class:`UpstreamRequest` and returns an :class:`UpstreamResponse` (status, headers,
`read()`, `iter_bytes()`, `close()`). Each provider gets one client, built once, with its
configured pool limits and timeouts. Three client kinds, chosen per provider by
`transport:` and by measurement (bench/overhead.py):

- `http1` (default): our small HTTP/1.1 client on httptools' parser
  (`gateway/providers/http1.py`). Against aiohttp, with the same pipeline, the gateway
  went from 3,247 to 4,452 requests/s (337 -> 246 us of CPU per request).
- `aiohttp` (`aiohttp_client.py`): aiohttp's C-accelerated client. With hundreds of
  requests in flight httpx's default transport spends its time scanning its connection
  pool (httpx issue #3215); over aiohttp the gateway served 2.8x the requests per second.
- `httpx` (`httpx_client.py`): httpx's own transport (HTTP/1.1 via httpcore), kept as
  the reference.

Tests swap the network by pointing providers at real local servers, not by replacing
this module.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.providers.base import ProviderClient, UpstreamRequest, UpstreamResponse
from gateway.providers.http1 import Http1Client
from gateway.settings.server import ProviderSettings


class Transport:
    """One client per provider, created at start and closed at shutdown."""

    def __init__(self, providers: Mapping[str, ProviderSettings]) -> None:
        self._clients: dict[str, ProviderClient] = {
            name: client_for(name, p) for name, p in providers.items()
        }

    async def send(self, provider: str, request: UpstreamRequest) -> UpstreamResponse:
        return await self._clients[provider].send(request)

    def client(self, provider: str) -> ProviderClient:
        """The provider's client, for what else must go out its way (a GPU pool's probes)."""
        return self._clients[provider]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


def client_for(name: str, settings: ProviderSettings) -> ProviderClient:
    """The configured client; each kind's library is imported only when used (aiohttp
    alone is 11 MB of a worker's memory)."""
    if settings.transport == "aiohttp":
        from gateway.providers.aiohttp_client import AiohttpClient

        return AiohttpClient(name, settings)
    if settings.transport == "httpx":
        from gateway.providers.httpx_client import HttpxClient

        return HttpxClient(name, settings)
    return Http1Client(name, settings)
