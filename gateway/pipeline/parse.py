"""Parse stage: body bytes -> typed request, or a 400 that names the `param`."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire.openai import ChatRequest

_PATH = re.compile(r" - at `\$\.?(.*)`$")


def parse_chat_request(body: bytes) -> tuple[ChatRequest, dict[str, Any]]:
    """Return the typed request and the raw JSON object (for pass-through fields)."""
    if not body:
        raise InvalidRequest("The request body is empty; expected a JSON object.")
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc}).", code="invalid_json"
        ) from None
    if not isinstance(raw, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    try:
        request = msgspec.convert(raw, ChatRequest)
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _PATH.search(message)
        param = match.group(1) if match else None
        detail = _PATH.sub("", message)
        if param is None and "missing required field" in detail:
            param = detail.rsplit("`", 2)[-2] if detail.count("`") >= 2 else None
        where = f" at '{param}'" if param else ""
        raise InvalidRequest(f"Invalid request{where}: {detail}.", param=param) from None
    return request, raw
