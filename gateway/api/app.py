"""The Litestar application: routes, the OpenAI-shaped error contract, lifecycle."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, delete, get, head, post, route
from litestar.exceptions import HTTPException

from gateway.admin.access import require_admin, spend_query
from gateway.admin.client_keys import bearer_token
from gateway.api.admin_routes import ADMIN_HANDLERS
from gateway.api.asgi_connection import BODY_WRITER, AsgiConnection
from gateway.api.asgi_io import Receive as RawReceive
from gateway.api.asgi_io import Scope as RawScope
from gateway.api.asgi_io import Send as RawSend
from gateway.api.console_routes import CONSOLE_HANDLERS
from gateway.api.openapi import openapi_document
from gateway.api.server_limits import ConnectionGuard
from gateway.errors import (
    ErrorBody,
    ErrorEnvelope,
    GatewayError,
    InternalError,
    InvalidRequest,
    NotFound,
)
from gateway.pipeline.connection import ClientConnection
from gateway.pipeline.conversation import item_list
from gateway.pipeline.count_tokens import serve_count_tokens
from gateway.pipeline.model_list import anthropic_model_list
from gateway.pipeline.run import serve
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import load_settings
from gateway.wire.openai import Model, ModelList

log = logging.getLogger("gateway")

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
FEEDBACK_MAX_BYTES = 16 * 1024
_STATUS_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}


def _runtime(request: Request[Any, Any, Any]) -> GatewayRuntime:
    runtime: GatewayRuntime = request.app.state.runtime
    return runtime


def _error_response(error: GatewayError) -> Response[bytes]:
    return Response(
        content=error.to_json(),
        status_code=error.status,
        media_type="application/json",
        headers=error.response_headers(),
    )


def _gateway_error(request: Request[Any, Any, Any], exc: GatewayError) -> Response[bytes]:
    return _error_response(_runtime(request).redactor.error(exc))


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorEnvelope]:
    status = exc.status_code
    message = exc.detail if status < 500 else "The gateway failed to serve this request."
    kind = _STATUS_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return Response(
        content=ErrorEnvelope(ErrorBody(message, kind, None, None)),
        status_code=status,
        headers=dict(exc.headers or {}),
    )


def _unexpected_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    return _error_response(InternalError("The gateway failed to serve this request."))


@get("/v1/models", sync_to_thread=False)
def list_models(request: Request[Any, Any, Any]) -> ModelList | Response[bytes]:
    runtime = _runtime(request)
    view = runtime.view
    created = int(runtime.started_at)
    if "anthropic-version" in request.headers:
        # an Anthropic SDK client (Claude Code lists models this way): its shape and errors
        status, body = anthropic_model_list(runtime, request.headers, created)
        return Response(content=body, status_code=status, media_type="application/json")
    caller = view.keys.authenticate(bearer_token(request.headers.get("authorization")))
    names = view.visible_names(caller.key.models)
    data = []
    for name in names:
        found = view.model(name)
        owner = (found[1].owned_by or found[1].deployments[0].provider) if found else "gateway"
        data.append(Model(id=name, created=created, owned_by=owner))
    return ModelList(data=data)


@route("/v1/models/{model_id:path}", http_method=["GET", "HEAD"], sync_to_thread=False)
def retrieve_model(request: Request[Any, Any, Any], model_id: str) -> Model:
    """One model or route the key may use; 404 for any other name, also one that exists
    but the key may not use (so keys cannot probe what others have). HEAD answers the
    same status without a body, for clients that probe."""
    runtime = _runtime(request)
    view = runtime.view
    caller = view.keys.authenticate(bearer_token(request.headers.get("authorization")))
    name = model_id.lstrip("/")
    known = view.model(name) is not None or name in view.policy.routes
    if not known or not view.allows(caller.key.models, name):
        raise NotFound(
            f"The model '{name}' does not exist or your key may not use it. "
            "GET /v1/models lists the models your key may use.",
            param="model",
        )
    found = view.model(name)
    owner = (found[1].owned_by or found[1].deployments[0].provider) if found else "gateway"
    return Model(id=name, created=int(runtime.started_at), owned_by=owner)


def _tenant(request: Request[Any, Any, Any]) -> str:
    view = _runtime(request).view
    return view.keys.authenticate(bearer_token(request.headers.get("authorization"))).tenant_id


def _json(body: Any) -> Response[bytes]:
    return Response(content=msgspec.json.encode(body), media_type="application/json")


@get("/v1/responses/{response_id:str}")
async def retrieve_response(request: Request[Any, Any, Any], response_id: str) -> Response[bytes]:
    """A stored response, for its own tenant only (any other tenant gets a 404)."""
    conversations = _runtime(request).conversation.conversations
    record = await conversations.record(_tenant(request), response_id)
    return _json(record.response)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request[Any, Any, Any], response_id: str) -> Response[bytes]:
    conversations = _runtime(request).conversation.conversations
    await conversations.delete(_tenant(request), response_id)
    return _json({"id": response_id, "object": "response", "deleted": True})


@get("/v1/responses/{response_id:str}/input_items")
async def list_input_items(request: Request[Any, Any, Any], response_id: str) -> Response[bytes]:
    """The conversation's input items up to that response (`order`, `limit`, `after`)."""
    conversations = _runtime(request).conversation.conversations
    record = await conversations.record(_tenant(request), response_id)
    params = request.query_params
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be asc or desc", param="order")
    try:
        limit = int(params.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise InvalidRequest("limit must be an integer from 1 to 100", param="limit")
    page = item_list(
        record.input_items, response_id, order=order, limit=limit, after=params.get("after")
    )
    return _json(page)


@post("/v1/feedback", status_code=200)
async def feedback(request: Request[Any, Any, Any]) -> Response[bytes]:
    """An application's label for one of its answered requests (docs/evaluation.md):
    `{"request_id", "metric", "value"}`, the metric declared in the policy."""
    runtime = _runtime(request)
    tenant = _tenant(request)
    raw = await request.body()
    if len(raw) > FEEDBACK_MAX_BYTES:
        raise InvalidRequest(f"The body is over {FEEDBACK_MAX_BYTES} bytes.", code="body_too_large")
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise InvalidRequest("The body is not valid JSON.", code="invalid_json") from None
    return _json(await runtime.evaluation.feedback(tenant, body))


@get("/openapi.json", sync_to_thread=False)
def openapi(request: Request[Any, Any, Any]) -> Response[bytes]:
    document: bytes = request.app.state.openapi
    return Response(content=document, media_type="application/json")


@get("/healthz", sync_to_thread=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@head("/healthz", sync_to_thread=False)
def healthz_head() -> None:
    """Load balancers and `curl -I` probe liveness with HEAD."""


@get("/readyz")
async def readyz(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    runtime = _runtime(request)
    report = await runtime.readiness()
    status = 200 if report["ready"] else 503
    return Response(content=limits_warning(report, request.app.state), status_code=status)


def limits_warning(report: dict[str, Any], state: Any) -> dict[str, Any]:
    """A degraded store under fail_open keeps the gateway in rotation (it serves), but
    rate limits and budgets are off: say so in the body, in a log line when it starts,
    and in `gateway_limits_enforced`, rather than answer a bare `ready: true`."""
    store = report.get("store")
    if not isinstance(store, dict):
        return report
    enforced = store.get("state") == "ok" or store.get("on_failure") != "fail_open"
    report = {**report, "limits_enforced": enforced}
    runtime: GatewayRuntime = state.runtime
    runtime.metrics.limits_enforced(enforced)
    if not enforced:
        report["warning"] = (
            "the limits store is unreachable and store.on_failure is fail_open: requests are "
            "served WITHOUT rate limits or budgets until it recovers"
        )
        if getattr(state, "limits_warned", False) is False:
            log.warning("/readyz: %s", report["warning"])
    state.limits_warned = not enforced
    return report


@get("/metrics", sync_to_thread=False)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    body, content_type = _runtime(request).metrics.render()
    # Litestar appends the charset itself to a text/* media type: give it the bare type
    media_type = content_type.replace("; charset=utf-8", "")
    return Response(content=body, media_type=media_type)


@get("/admin/spend")
async def admin_spend(request: Request[Any, Any, Any]) -> dict[str, object]:
    """Spend from the ledger, for the admin key (see admin/access.py for the filters)."""
    runtime = _runtime(request)
    require_admin(
        runtime.settings.config.server.admin_key_hash, request.headers.get("authorization")
    )
    query = spend_query(request.query_params, datetime.now(UTC))
    return await runtime.spend_report(query)


@get("/admin/evaluation/labels")
async def admin_labels(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The newest labels online evaluation stored (`limit`, default 1000), for the admin
    key: what `gateway route quality` reads from a gateway on the in-memory store."""
    runtime = _runtime(request)
    require_admin(
        runtime.settings.config.server.admin_key_hash, request.headers.get("authorization")
    )
    try:
        limit = int(request.query_params.get("limit", "1000"))
    except ValueError:
        raise InvalidRequest("limit must be an integer", param="limit") from None
    body = await runtime.evaluation.labels_json(limit)
    return Response(content=body, media_type="application/json")


class GatewayApp:
    """The ASGI app: the endpoints the pipeline serves (the hot path) go straight to it,
    paying for no framework machinery; every other route, and the lifespan, to Litestar."""

    def __init__(self, litestar: Litestar, runtime: GatewayRuntime) -> None:
        self.litestar = litestar
        self.runtime = runtime
        # found by the HTTP protocol (gateway/api/server_limits.py) under uvicorn's wrappers
        self.connection_guard = ConnectionGuard(
            lambda: runtime.settings.config.server.connections, runtime.metrics
        )

    async def __call__(self, scope: RawScope, receive: RawReceive, send: RawSend) -> None:
        if scope["type"] == "http":
            codec = self.runtime.codecs.get(scope["path"])
            if codec is not None:
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                extensions = scope.get("extensions")
                connection = AsgiConnection(
                    receive,
                    send,
                    headers.get("content-length"),
                    headers.get("content-encoding"),
                    extensions.get(BODY_WRITER) if extensions else None,
                )
                await serve(
                    self.runtime, codec, scope["method"], scope["path"], headers, connection
                )
                return
            if scope["path"] == COUNT_TOKENS_PATH:
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                connection = AsgiConnection(receive, send, headers.get("content-length"))
                await serve_count_tokens(self.runtime, scope["method"], headers, connection)
                return
        await self.litestar(scope, receive, send)  # type: ignore[arg-type]

    # what the gateway's HTTP protocol serves without ASGI (gateway/api/hot_exchange.py)
    def serves_directly(self, path: str) -> bool:
        return path in self.runtime.codecs or path == COUNT_TOKENS_PATH

    def serve_directly(
        self, method: str, path: str, headers: Mapping[str, str], connection: ClientConnection
    ) -> Awaitable[None]:
        codec = self.runtime.codecs.get(path)
        if codec is not None:
            return serve(self.runtime, codec, method, path, headers, connection)
        return serve_count_tokens(self.runtime, method, headers, connection)


def create_app(runtime: GatewayRuntime) -> GatewayApp:
    app = Litestar(
        route_handlers=[
            list_models,
            retrieve_model,
            retrieve_response,
            delete_response,
            list_input_items,
            feedback,
            healthz,
            healthz_head,
            readyz,
            metrics,
            admin_spend,
            admin_labels,
            *ADMIN_HANDLERS,
            *CONSOLE_HANDLERS,
            openapi,
        ],
        exception_handlers={
            GatewayError: _gateway_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
        on_startup=[runtime.start],
        on_shutdown=[runtime.stop],
        openapi_config=None,
        debug=False,
        logging_config=None,
    )
    app.state.runtime = runtime
    app.state.openapi = openapi_document()
    return GatewayApp(app, runtime)


def app_from_env() -> GatewayApp:
    """Factory for `uvicorn --factory` (several workers): the config path comes from
    GATEWAY_CONFIG, set by `gateway serve`."""
    settings = load_settings(os.environ["GATEWAY_CONFIG"])
    return create_app(GatewayRuntime(settings, serving_process=True))
