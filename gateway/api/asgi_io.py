"""Small ASGI helpers for the hot path: read a bounded body, send JSON, send errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gateway.errors import BodyTooLarge, GatewayError, InvalidRequest
from gateway.pipeline.connection import ClientGone

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]

JSON_CONTENT_TYPE = (b"content-type", b"application/json")


async def read_body(receive: Receive, content_length: int | None, limit: int) -> bytes:
    """Read the request body, refusing it as soon as it passes `limit` bytes: a declared
    length over the limit is refused before reading anything, an undeclared one after
    reading no more than limit + one chunk."""
    if content_length is not None and content_length > limit:
        raise BodyTooLarge(_too_large(limit))
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
                raise BodyTooLarge(_too_large(limit))
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> str:
    return (
        f"Request body too large: the limit is {limit} bytes ({limit // (1024 * 1024)} MiB). "
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


async def send_error(
    send: Send, error: GatewayError, headers: RawHeaders, close: bool = False
) -> None:
    extra = [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in error.response_headers().items()
    ]
    await send_bytes(send, error.status, error.to_json(), [*headers, *extra], close=close)
