"""Decode stage: the body, read within the configured limit, through the ingress codec
into the internal request (400 naming the `param` when it is not one)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.ingress.base import IngressCodec
from gateway.pipeline.connection import ClientConnection
from gateway.pipeline.flow import Flow


async def decode(
    flow: Flow,
    codec: IngressCodec,
    connection: ClientConnection,
    headers: Mapping[str, str],
    max_body_bytes: int,
) -> None:
    body = await connection.read_body(max_body_bytes)
    decoded = codec.decode(body, headers)
    flow.request = decoded.request
    flow.raw = decoded.chat_body
    flow.native = decoded.native_body
    flow.untranslatable = decoded.untranslatable
    flow.translation_changes = decoded.translation_changes
    flow.builtin_tools = decoded.builtin_tools
