"""HTTP of the admin API for runtime tenants, keys and the audit trail (admin key only).

    POST   /admin/tenants                 create a tenant          201
    GET    /admin/tenants                 YAML and runtime tenants
    GET    /admin/tenants/{id}
    PATCH  /admin/tenants/{id}            change limits, budgets, model_limits, overrides
    DELETE /admin/tenants/{id}            a runtime tenant without live keys
    POST   /admin/keys                    issue a key (the key is in this answer only)  201
    GET    /admin/keys[?tenant=]          YAML and runtime keys (never a key or its hash)
    GET    /admin/keys/{id}
    PATCH  /admin/keys/{id}               change models, limits, budgets
    POST   /admin/keys/{id}/rotate        a new key; the old one works `grace_seconds` more
    POST   /admin/keys/{id}/revoke        refused by every replica within a second
    GET    /admin/audit[?limit=]          who changed what, when (newest first)

The decisions are the admin room's (admin/decisions.py, admin/tenancy.py).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, delete, get, patch, post

from gateway.admin.access import require_admin
from gateway.admin.client_keys import bearer_token
from gateway.admin.decisions import (
    Actor,
    KeyPatch,
    NewKey,
    NewTenant,
    Rotation,
    TenantPatch,
    parse_body,
)
from gateway.admin.tenancy import TenancyAdmin
from gateway.errors import AuthenticationFailed, InvalidRequest, PermissionDenied
from gateway.pipeline.runtime import GatewayRuntime

ACTOR_HEADER = "x-gateway-actor"
MAX_AUDIT = 1000


def _runtime(request: Request[Any, Any, Any]) -> GatewayRuntime:
    runtime: GatewayRuntime = request.app.state.runtime
    return runtime


def admin_of(request: Request[Any, Any, Any]) -> TenancyAdmin:
    """The admin operations, once the request carries the admin key: a client key gets a
    403 that says so, anything else a 401."""
    runtime = _runtime(request)
    authorization = request.headers.get("authorization")
    try:
        require_admin(runtime.settings.config.server.admin_key_hash, authorization)
    except AuthenticationFailed:
        if not _is_client_key(runtime, authorization):
            raise
        raise PermissionDenied(
            "This is a client key: the admin endpoints need the admin key (server.admin_key_hash).",
            code="admin_key_required",
        ) from None
    return runtime.tenancy


def _is_client_key(runtime: GatewayRuntime, authorization: str | None) -> bool:
    try:
        runtime.view.keys.authenticate(bearer_token(authorization))
    except AuthenticationFailed:
        return False
    return True


def actor_of(request: Request[Any, Any, Any]) -> Actor:
    """Who the audit entry names: the client's `x-gateway-actor` (printable, cut to 64
    characters; `gateway keys` sends the user's login), else "admin"."""
    given = "".join(c for c in request.headers.get(ACTOR_HEADER, "") if c.isprintable())[:64]
    address = request.client.host if request.client is not None else ""
    return Actor(given.strip() or "admin", address)


def _json(body: Any, status: int = 200) -> Response[bytes]:
    return Response(
        content=msgspec.json.encode(body), status_code=status, media_type="application/json"
    )


def _list(data: list[dict[str, Any]]) -> Response[bytes]:
    return _json({"object": "list", "data": data})


@post("/admin/tenants")
async def create_tenant(request: Request[Any, Any, Any]) -> Response[bytes]:
    admin = admin_of(request)
    body = parse_body(await request.body(), NewTenant)
    return _json(await admin.create_tenant(body, actor_of(request)), 201)


@get("/admin/tenants")
async def list_tenants(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _list(await admin_of(request).tenants())


@get("/admin/tenants/{tenant_id:str}")
async def get_tenant(request: Request[Any, Any, Any], tenant_id: str) -> Response[bytes]:
    return _json(await admin_of(request).tenant(tenant_id))


@patch("/admin/tenants/{tenant_id:str}")
async def update_tenant(request: Request[Any, Any, Any], tenant_id: str) -> Response[bytes]:
    admin = admin_of(request)
    body = parse_body(await request.body(), TenantPatch)
    return _json(await admin.update_tenant(tenant_id, body, actor_of(request)))


@delete("/admin/tenants/{tenant_id:str}", status_code=200)
async def delete_tenant(request: Request[Any, Any, Any], tenant_id: str) -> Response[bytes]:
    return _json(await admin_of(request).delete_tenant(tenant_id, actor_of(request)))


@post("/admin/keys")
async def issue_key(request: Request[Any, Any, Any]) -> Response[bytes]:
    admin = admin_of(request)
    body = parse_body(await request.body(), NewKey)
    return _json(await admin.issue_key(body, actor_of(request)), 201)


@get("/admin/keys")
async def list_keys(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _list(await admin_of(request).keys(request.query_params.get("tenant")))


@get("/admin/keys/{key_id:str}")
async def get_key(request: Request[Any, Any, Any], key_id: str) -> Response[bytes]:
    return _json(await admin_of(request).key(key_id))


@patch("/admin/keys/{key_id:str}")
async def update_key(request: Request[Any, Any, Any], key_id: str) -> Response[bytes]:
    admin = admin_of(request)
    body = parse_body(await request.body(), KeyPatch)
    return _json(await admin.update_key(key_id, body, actor_of(request)))


@post("/admin/keys/{key_id:str}/rotate", status_code=200)
async def rotate_key(request: Request[Any, Any, Any], key_id: str) -> Response[bytes]:
    admin = admin_of(request)
    body = parse_body(await request.body(), Rotation)
    return _json(await admin.rotate_key(key_id, body, actor_of(request)))


@post("/admin/keys/{key_id:str}/revoke", status_code=200)
async def revoke_key(request: Request[Any, Any, Any], key_id: str) -> Response[bytes]:
    return _json(await admin_of(request).revoke_key(key_id, actor_of(request)))


@get("/admin/audit")
async def list_audit(request: Request[Any, Any, Any]) -> Response[bytes]:
    admin = admin_of(request)
    try:
        limit = int(request.query_params.get("limit", "100"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_AUDIT:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_AUDIT}", param="limit")
    return _list(await admin.audit(limit))


ADMIN_HANDLERS = [
    create_tenant,
    list_tenants,
    get_tenant,
    update_tenant,
    delete_tenant,
    issue_key,
    list_keys,
    get_key,
    update_key,
    rotate_key,
    revoke_key,
    list_audit,
]
