"""`transport: aiohttp`: aiohttp's C-accelerated HTTP/1.1 client under the transport seam."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp

from gateway.errors import UpstreamError, UpstreamUnavailable
from gateway.providers.base import UpstreamRequest, UpstreamResponse
from gateway.providers.network_errors import closed as _closed
from gateway.providers.network_errors import refused as _refused
from gateway.providers.network_errors import timed_out as _timeout
from gateway.settings.server import ProviderSettings


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
