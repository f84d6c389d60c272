"""Authenticate stage: the client's gateway key, wherever its API carries it -> the
tenant and key record it belongs to (401 when missing or unknown)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.ingress.base import IngressCodec
from gateway.pipeline.flow import Flow


def authenticate(flow: Flow, codec: IngressCodec, headers: Mapping[str, str]) -> None:
    flow.caller = flow.view.keys.authenticate(codec.api_key(headers))
