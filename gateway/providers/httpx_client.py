"""`transport: httpx`: httpx's own transport (HTTP/1.1 via httpcore), kept as the reference."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx

from gateway.errors import UpstreamError, UpstreamUnavailable
from gateway.providers.base import UpstreamRequest, UpstreamResponse
from gateway.providers.network_errors import closed as _closed
from gateway.providers.network_errors import refused as _refused
from gateway.providers.network_errors import timed_out as _timeout
from gateway.settings.server import ProviderSettings


class HttpxResponse:
    __slots__ = ("_provider", "_response", "headers", "status")

    def __init__(self, response: httpx.Response, provider: str) -> None:
        self._response = response
        self._provider = provider
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, self._provider) from None
        finally:
            await self._response.aclose()

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, self._provider) from None

    async def close(self) -> None:
        await self._response.aclose()


class HttpxClient:
    def __init__(self, name: str, settings: ProviderSettings) -> None:
        self._name = name
        timeouts, pool = settings.timeouts, settings.pool
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=timeouts.connect,
                read=timeouts.read,
                write=timeouts.write,
                pool=timeouts.pool,
            ),
            limits=httpx.Limits(
                max_connections=pool.max_connections,
                max_keepalive_connections=pool.max_keepalive_connections,
                keepalive_expiry=pool.keepalive_expiry,
            ),
            # an upstream is exactly the URL the config names
            follow_redirects=False,
            trust_env=False,
        )

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        http_request = self._client.build_request(
            request.method, request.url, content=request.body, headers=request.headers
        )
        try:
            response = await self._client.send(http_request, stream=True)
        except httpx.HTTPError as exc:
            raise map_httpx_error(exc, self._name) from None
        return HttpxResponse(response, self._name)

    async def close(self) -> None:
        await self._client.aclose()


def map_httpx_error(exc: httpx.HTTPError, provider: str) -> UpstreamError:
    if isinstance(exc, httpx.ConnectTimeout):
        return _timeout("connecting to", provider)
    if isinstance(exc, httpx.PoolTimeout):
        return _timeout("waiting for a free connection to", provider)
    if isinstance(exc, httpx.TimeoutException):
        return _timeout("waiting for data from", provider)
    if isinstance(exc, httpx.ConnectError):
        return _refused(provider)
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return _closed(provider)
    return UpstreamUnavailable(
        f"request to provider '{provider}' failed ({type(exc).__name__})", provider=provider
    )
