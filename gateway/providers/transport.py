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
- `aiohttp`: aiohttp's C-accelerated client. With hundreds of requests in flight httpx's
  default transport spends its time scanning its connection pool (httpx issue #3215);
  over aiohttp the gateway served 2.8x the requests per second.
- `httpx`: httpx's own transport (HTTP/1.1 via httpcore), kept as the reference.

Tests swap the network by pointing providers at real local servers, not by replacing
this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

import aiohttp
import httpx

from gateway.errors import (
    UpstreamError,
    UpstreamUnavailable,
)
from gateway.providers.base import UpstreamRequest
from gateway.providers.http1 import Http1Client
from gateway.providers.network_errors import closed as _closed
from gateway.providers.network_errors import refused as _refused
from gateway.providers.network_errors import timed_out as _timeout
from gateway.settings.server import ProviderSettings


class UpstreamResponse(Protocol):
    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes: ...

    def iter_bytes(self) -> AsyncIterator[bytes]: ...

    async def close(self) -> None: ...


class ProviderClient(Protocol):
    async def send(self, request: UpstreamRequest) -> UpstreamResponse: ...

    async def close(self) -> None: ...


class Transport:
    """One client per provider, created at start and closed at shutdown."""

    def __init__(self, providers: Mapping[str, ProviderSettings]) -> None:
        self._clients: dict[str, ProviderClient] = {
            name: _CLIENTS[p.transport](name, p) for name, p in providers.items()
        }

    async def send(self, provider: str, request: UpstreamRequest) -> UpstreamResponse:
        return await self._clients[provider].send(request)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


# -- aiohttp ------------------------------------------------------------------------


class AiohttpResponse:
    __slots__ = ("_provider", "_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse, provider: str) -> None:
        self._response = response
        self._provider = provider
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise map_aiohttp_error(exc, self._provider) from None
        finally:
            self._response.release()

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise map_aiohttp_error(exc, self._provider) from None

    async def close(self) -> None:
        # a stream cut short closes its connection: the upstream sees the client leave
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpClient:
    def __init__(self, name: str, settings: ProviderSettings) -> None:
        self._name = name
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None
        timeouts = settings.timeouts
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.pool + timeouts.connect,
            sock_connect=timeouts.connect,
            sock_read=timeouts.read,
        )

    def _open(self) -> aiohttp.ClientSession:
        # created on first use, inside the server's event loop
        pool = self._settings.pool
        connector = aiohttp.TCPConnector(
            limit=pool.max_connections,
            limit_per_host=0,
            keepalive_timeout=pool.keepalive_expiry,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            trust_env=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self._session

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        session = self._session or self._open()
        try:
            response = await session.request(
                request.method,
                request.url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise map_aiohttp_error(exc, self._name) from None
        return AiohttpResponse(response, self._name)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def map_aiohttp_error(exc: BaseException, provider: str) -> UpstreamError:
    """aiohttp's errors carry the URL; the message we keep names only the provider."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return _timeout("connecting to", provider)
    if isinstance(exc, aiohttp.SocketTimeoutError | TimeoutError):
        return _timeout("waiting for data from", provider)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _refused(provider)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return _closed(provider)
    if isinstance(exc, aiohttp.ClientOSError):
        return _closed(provider)
    return UpstreamUnavailable(
        f"request to provider '{provider}' failed ({type(exc).__name__})", provider=provider
    )


# -- httpx --------------------------------------------------------------------------


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


_CLIENTS: dict[str, Callable[[str, ProviderSettings], ProviderClient]] = {
    "http1": Http1Client,
    "aiohttp": AiohttpClient,
    "httpx": HttpxClient,
}
