"""A client's output cap above the served model's maximum output, clamped to it.

Coding agents ask for what their own default model allows (Claude Code: `max_tokens:
32000`), which a route may serve on a model that stops at 8,192 (DeepSeek). A route
with `max_tokens_over_limit: clamp` (the default) sends the model's maximum instead and
says so in `x-gateway-route` (`changed=max_tokens:32000->8192`); `refuse` routes never
get here (the planner drops models the cap does not fit). Every field naming the cap is
clamped: the internal request's, the chat body's, and the client's own body for a
same-API upstream (Anthropic `max_tokens`, Responses `max_output_tokens`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.providers.base import Call

# the fields that cap output, in every ingress API's body
_CAP_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def clamp_output(call: Call, limit: int) -> tuple[Call, str | None]:
    """`call` with every output cap above `limit` set to `limit`, and the change as the
    route header says it (None, and `call` itself, when nothing was above)."""
    asked = call.request.output_limit
    if asked is None or asked <= limit:
        return call, None
    request = call.request
    fields: dict[str, int] = {}
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(request, name)
        if value is not None and value > limit:
            fields[name] = limit
    clamped = dataclasses.replace(
        call,
        request=msgspec.structs.replace(request, **fields),
        raw=_clamped_body(call.raw, limit),
        native=_clamped_native(call.native, limit),
    )
    return clamped, f"{_field(call)}:{asked}->{limit}"


def _field(call: Call) -> str:
    native = call.native or call.raw
    for name in _CAP_FIELDS:
        if name in native:
            return name
    return "max_tokens"


def _clamped_body(body: Mapping[str, Any], limit: int) -> dict[str, Any]:
    out = dict(body)
    for name in _CAP_FIELDS:
        value = out.get(name)
        if isinstance(value, int) and value > limit:
            out[name] = limit
    return out


def _clamped_native(native: Mapping[str, Any] | None, limit: int) -> Mapping[str, Any] | None:
    """The client's own body clamped; one that carries its exact bytes (the Anthropic
    passthrough's) gets them re-encoded, since they are what is forwarded."""
    if native is None:
        return None
    body = _clamped_body(native, limit)
    rebuild = getattr(native, "with_body", None)
    if callable(rebuild):
        rebuilt: Mapping[str, Any] = rebuild(body)
        return rebuilt
    return body
