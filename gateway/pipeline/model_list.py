"""`GET /v1/models` in Anthropic's shape, for clients that send `anthropic-version`
(the anthropic SDK's `models.list()`, Claude Code): the models and routes the key may
use, and errors in Anthropic's shape."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from gateway.errors import GatewayError
from gateway.ingress import anthropic_messages as codec

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime


def anthropic_model_list(
    runtime: GatewayRuntime, headers: Mapping[str, str], created: int
) -> tuple[int, bytes]:
    """(status, body) of the list, or of the error that refused it."""
    try:
        view = runtime.view
        caller = view.keys.authenticate(codec.api_key(headers))
    except GatewayError as error:
        return error.status, codec.error_body(runtime.redactor.error(error))
    created_at = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    names = view.visible_names(caller.key.models)
    data = [
        {"type": "model", "id": name, "display_name": name, "created_at": created_at}
        for name in names
    ]
    body = {
        "data": data,
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
    return 200, msgspec.json.encode(body)
