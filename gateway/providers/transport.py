"""The one way out of the gateway: a shared `httpx.AsyncClient` per provider, and the
mapping of httpx's errors into our error tree where they enter.

Like httpx's own transport seam, everything above this module sees only
:class:`UpstreamRequest` in and an :class:`UpstreamResponse` out; tests swap the network
by pointing providers at real local servers, not by replacing this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import httpx

from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.providers.base import UpstreamRequest
from gateway.settings.server import ProviderSettings


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: httpx.Headers
    _response: httpx.Response
    provider: str

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, self.provider) from None
        finally:
            await self._response.aclose()

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, self.provider) from None

    async def close(self) -> None:
        await self._response.aclose()


def build_client(settings: ProviderSettings) -> httpx.AsyncClient:
    timeouts = settings.timeouts
    limits = settings.pool
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=timeouts.connect, read=timeouts.read, write=timeouts.write, pool=timeouts.pool
        ),
        limits=httpx.Limits(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
        ),
        # the gateway never follows redirects or reads proxy settings from the
        # environment: an upstream is exactly the URL the config names
        follow_redirects=False,
        trust_env=False,
    )


class Transport:
    """One client per provider, created at start and closed at shutdown."""

    def __init__(self, providers: Mapping[str, ProviderSettings]) -> None:
        self._clients = {name: build_client(p) for name, p in providers.items()}

    async def send(self, provider: str, request: UpstreamRequest) -> UpstreamResponse:
        client = self._clients[provider]
        http_request = client.build_request(
            request.method, request.url, content=request.body, headers=request.headers
        )
        try:
            response = await client.send(http_request, stream=True)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, provider) from None
        return UpstreamResponse(response.status_code, response.headers, response, provider)

    async def get(self, provider: str, url: str, timeout_seconds: float) -> httpx.Response:
        try:
            return await self._clients[provider].get(url, timeout=timeout_seconds)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, provider) from None

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()


def map_transport_error(exc: httpx.HTTPError, provider: str) -> UpstreamError:
    """httpx errors carry the URL; the message we keep names only the provider."""
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting to",
            httpx.ReadTimeout: "waiting for data from",
            httpx.WriteTimeout: "sending to",
            httpx.PoolTimeout: "waiting for a free connection to",
        }.get(type(exc), "talking to")
        return UpstreamTimeout(f"timed out {phase} provider '{provider}'", provider=provider)
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnavailable(
            f"could not connect to provider '{provider}' (connection refused or unreachable)",
            provider=provider,
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return UpstreamUnavailable(
            f"provider '{provider}' closed the connection unexpectedly", provider=provider
        )
    return UpstreamUnavailable(
        f"request to provider '{provider}' failed ({type(exc).__name__})", provider=provider
    )
