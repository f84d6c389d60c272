"""What the admin endpoints check: the admin key, and the spend query a
request's parameters ask for."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from datetime import datetime

from gateway.admin.client_keys import bearer_token, hash_key
from gateway.errors import AuthenticationFailed, InvalidRequest, PermissionDenied
from gateway.metering.spend import GroupBy, SpendQuery, parse_time

GROUP_BY_CHOICES: tuple[GroupBy, ...] = ("tenant", "key", "model", "provider", "day")


def require_admin(expected_hash: str | None, authorization: str | None) -> None:
    if not expected_hash:
        raise PermissionDenied(
            "Admin endpoints are off: set server.admin_key_hash to enable them.",
            code="admin_disabled",
        )
    token = bearer_token(authorization)
    if not token:
        raise AuthenticationFailed("Missing admin key: send 'Authorization: Bearer <key>'.")
    if not hmac.compare_digest(hash_key(token), expected_hash):
        raise AuthenticationFailed("Incorrect admin key provided.")


def spend_query(params: Mapping[str, str], now: datetime) -> SpendQuery:
    """Filters tenant, key, model, from, to (ISO time or a duration such as `7d`) and
    group_by, or a 400 naming the parameter that is wrong."""
    asked = params.get("group_by")
    group_by = next((choice for choice in GROUP_BY_CHOICES if choice == asked), None)
    if asked is not None and group_by is None:
        raise InvalidRequest(
            f"group_by must be one of {', '.join(GROUP_BY_CHOICES)}", param="group_by"
        )
    try:
        return SpendQuery(
            tenant=params.get("tenant"),
            key=params.get("key"),
            model=params.get("model"),
            since=parse_time(params["from"], now) if "from" in params else None,
            until=parse_time(params["to"], now) if "to" in params else None,
            group_by=group_by,
        )
    except ValueError as exc:
        raise InvalidRequest(f"Invalid time filter: {exc}", param="from") from None
