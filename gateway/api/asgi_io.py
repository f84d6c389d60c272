"""Small ASGI helpers for the hot path: read a bounded body, send JSON, send errors."""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gateway.errors import BodyTooLarge, ClientError, InvalidRequest
from gateway.pipeline.connection import ClientGone

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]

JSON_CONTENT_TYPE = (b"content-type", b"application/json")


class UnsupportedEncoding(ClientError):
    status = 415
    code = "unsupported_content_encoding"


# zlib's window bits: gzip framing, zlib framing (HTTP's "deflate"), raw deflate
_GZIP, _ZLIB, _RAW_DEFLATE = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS, -zlib.MAX_WBITS


async def read_body(
    receive: Receive, content_length: int | None, limit: int, content_encoding: str | None = None
) -> bytes:
    """Read the request body, refusing it as soon as it passes `limit` bytes: a declared
    length over the limit is refused before reading anything, an undeclared one after
    reading no more than limit + one chunk. A `gzip` or `deflate` body is inflated as it
    arrives, and the limit holds for the inflated bytes too (a zip bomb is refused once
    it has inflated to the limit, not after); other encodings get a 415."""
    inflater = _Inflater(content_encoding, limit) if content_encoding else None
    if content_length is not None and content_length > limit:
        raise BodyTooLarge(body_too_large(limit))
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(body_too_large(limit))
            chunks.append(chunk if inflater is None else inflater.feed(chunk))
        if not message.get("more_body", False):
            break
    if inflater is not None:
        chunks.append(inflater.finish())
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _Inflater:
    """Inflates one gzip/deflate body chunk by chunk, never past `limit` bytes out."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise UnsupportedEncoding(
                f"Content-Encoding {content_encoding!r} is not supported; send the body "
                "uncompressed, or with gzip or deflate.",
                param="content-encoding",
            )
        self._coding = codings[0] if codings else None
        self._limit = limit
        self._out = 0
        self._inflate: Any = None
        if self._coding is not None:
            self._inflate = zlib.decompressobj(_ZLIB if self._coding == "deflate" else _GZIP)
        self._first = True

    def feed(self, chunk: bytes) -> bytes:
        if self._inflate is None:
            return chunk
        if self._first and self._coding == "deflate" and not _has_zlib_header(chunk):
            # "deflate" without its zlib header: what some clients send
            self._inflate = zlib.decompressobj(_RAW_DEFLATE)
        self._first = False
        try:
            # at most one byte past the limit: enough to know it is over
            data: bytes = self._inflate.decompress(chunk, self._limit - self._out + 1)
        except zlib.error as exc:
            raise self._corrupt(exc) from None
        self._out += len(data)
        if self._out > self._limit or self._inflate.unconsumed_tail:
            raise BodyTooLarge(body_too_large(self._limit, inflated=True))
        return data

    def finish(self) -> bytes:
        if self._inflate is None:
            return b""
        if not self._inflate.eof:
            raise self._corrupt(None)
        if self._inflate.unused_data:
            raise InvalidRequest(
                f"The {self._coding} body has data after its end; send one {self._coding} stream.",
                param="content-encoding",
            )
        return b""

    def _corrupt(self, exc: zlib.error | None) -> InvalidRequest:
        why = f" ({exc})" if exc is not None else " (it ends before the compressed data does)"
        return InvalidRequest(
            f"The request body is not valid {self._coding} data{why}.",
            param="content-encoding",
            code="invalid_content_encoding",
        )


def _has_zlib_header(chunk: bytes) -> bool:
    return len(chunk) >= 2 and chunk[0] & 0x0F == 8 and (chunk[0] << 8 | chunk[1]) % 31 == 0


def body_too_large(limit: int, *, inflated: bool = False) -> str:
    what = "Request body too large once decompressed" if inflated else "Request body too large"
    return (
        f"{what}: the limit is {limit} bytes ({limit // (1024 * 1024)} MiB). "
        "Send smaller images or split the request."
    )


def parse_content_length(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise InvalidRequest("Invalid Content-Length header.") from None
    if length < 0:
        raise InvalidRequest("Invalid Content-Length header.")
    return length


async def send_bytes(
    send: Send, status: int, body: bytes, headers: RawHeaders, close: bool = False
) -> None:
    all_headers = [JSON_CONTENT_TYPE, (b"content-length", str(len(body)).encode()), *headers]
    if close:
        all_headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
