"""Authenticate stage: the client's gateway key, wherever its API carries it -> the
tenant and key record it belongs to (401 when missing or unknown).

An unknown key is looked for once more after the runtime key set has caught up with the
admin store (admin/runtime_keys.py): a key issued on another replica a moment ago
works here at once. Known keys never wait for anything."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from gateway.errors import AuthenticationFailed
from gateway.ingress.base import IngressCodec
from gateway.pipeline.flow import Flow
from gateway.pipeline.policy_view import PolicyView


def authenticate(flow: Flow, codec: IngressCodec, headers: Mapping[str, str]) -> None:
    flow.caller = flow.view.keys.authenticate(codec.api_key(headers))


async def authenticate_after_catching_up(
    flow: Flow,
    codec: IngressCodec,
    headers: Mapping[str, str],
    refused: AuthenticationFailed,
    caught_up: Callable[[PolicyView], Awaitable[PolicyView | None]],
) -> None:
    """After `refused`: once the key set has changed (`caught_up` gives the new view),
    authenticate again on it; else the refusal stands."""
    if not codec.api_key(headers):
        raise refused
    view = await caught_up(flow.view)
    if view is None:
        raise refused
    flow.view = view
    authenticate(flow, codec, headers)
