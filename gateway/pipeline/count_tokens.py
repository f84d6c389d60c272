"""`POST /v1/messages/count_tokens`: Anthropic's free token count of a Messages prompt.

Authenticated like any request (the same keys, the same model allow-lists) but not
planned, limited, metered or sent upstream: the count is the gateway's own offline one
(`ingress.anthropic_messages.count_tokens`, with the model's configured tokenizer), so
it answers the same whichever upstream would serve the model. For Claude models it is
an estimate: Anthropic does not publish its tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.errors import GatewayError, MethodNotAllowed, NotFound, PermissionDenied
from gateway.ingress import anthropic_messages as codec
from gateway.pipeline.connection import ClientConnection
from gateway.pipeline.respond import JSON_HEADERS

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime


async def serve_count_tokens(
    runtime: GatewayRuntime, method: str, headers: Mapping[str, str], connection: ClientConnection
) -> None:
    request_id = runtime.request_ids.new(headers)
    status, extra = 200, {}
    try:
        if method != "POST":
            raise MethodNotAllowed(
                "Use POST for /v1/messages/count_tokens.", headers={"allow": "POST"}
            )
        body = count_tokens_answer(
            runtime,
            headers,
            await connection.read_body(runtime.settings.config.server.max_body_bytes),
        )
    except GatewayError as error:
        error = runtime.redactor.error(error)
        status, extra, body = error.status, error.response_headers(), codec.error_body(error)
    await connection.start(
        status,
        [
            *JSON_HEADERS,
            (b"content-length", str(len(body)).encode()),
            (b"request-id", request_id.encode()),
            (b"x-request-id", request_id.encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()),
        ],
    )
    await connection.send(body, more=False)


def count_tokens_answer(runtime: GatewayRuntime, headers: Mapping[str, str], body: bytes) -> bytes:
    view = runtime.view
    caller = view.keys.authenticate(codec.api_key(headers))
    native = codec.decode_json(body, max_depth=runtime.settings.config.server.max_json_depth)
    request = codec.parse_count_tokens(native)
    found = view.model(request.model)
    if found is None and request.model not in view.policy.routes:
        raise NotFound(f"The model '{request.model}' does not exist.", param="model")
    if not view.allows(caller.key.models, request.model):
        raise PermissionDenied(f"This key may not use the model '{request.model}'.", param="model")
    tokenizer = found[1].tokenizer if found is not None else "cl100k"
    return codec.count_tokens_body(codec.count_tokens(native, tokenizer))
