"""HTTP of the console at /console: an admin-key login form that sets a session cookie
(HttpOnly, SameSite=Strict, never the key itself; the key never travels in a URL), one
page of facts, and forms that make tenants and keys through the same admin operations as
/admin/ (audited, actor "console")."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from litestar import Request, Response, get, post

from gateway.admin.console_pages import SECURITY_HEADERS, console_html, login_page
from gateway.admin.decisions import Actor, NewKey, NewTenant
from gateway.errors import GatewayError, PermissionDenied
from gateway.pipeline.console import (
    SESSION_COOKIE,
    SESSION_SECONDS,
    console_page,
    log_in,
    log_out,
    session_alive,
)
from gateway.pipeline.runtime import GatewayRuntime


def _runtime(request: Request[Any, Any, Any]) -> GatewayRuntime:
    runtime: GatewayRuntime = request.app.state.runtime
    return runtime


def _html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        content=body,
        status_code=status,
        media_type="text/html",
        headers={**SECURITY_HEADERS, **(headers or {})},
    )


def _to_console(cookie: str | None = None) -> Response[str]:
    headers = {"location": "/console"}
    if cookie is not None:
        headers["set-cookie"] = cookie
    return Response(content="", status_code=303, headers={**SECURITY_HEADERS, **headers})


def _cookie(request: Request[Any, Any, Any], token: str, max_age: int) -> str:
    secure = "; Secure" if _scheme(request) == "https" else ""
    return (
        f"{SESSION_COOKIE}={token}; Path=/console; Max-Age={max_age}; HttpOnly; "
        f"SameSite=Strict{secure}"
    )


def _scheme(request: Request[Any, Any, Any]) -> str:
    forwarded = request.headers.get("x-forwarded-proto")
    return forwarded.split(",")[0].strip() if forwarded else request.url.scheme


async def _form(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The posted form, after checking it was posted by the console's own page (a
    browser sends Origin with a POST; another site's origin is refused)."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise PermissionDenied("This form was posted from another site.", code="cross_site")
    raw = (await request.body()).decode("utf-8", "replace")
    return {name: values[-1] for name, values in parse_qs(raw).items()}


def _token(request: Request[Any, Any, Any]) -> str | None:
    token: str | None = request.cookies.get(SESSION_COOKIE)
    return token


def _actor(request: Request[Any, Any, Any]) -> Actor:
    return Actor("console", request.client.host if request.client is not None else "")


def _limit_fields(form: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if form.get("rpm", "").strip():
        body["limits"] = {"requests_per_minute": form["rpm"].strip()}
    if form.get("budget_usd", "").strip():
        period = form.get("budget_period", "month")
        body["budgets"] = [{"usd": form["budget_usd"].strip(), "period": period}]
    return body


@get("/console")
async def console(request: Request[Any, Any, Any]) -> Response[str]:
    runtime = _runtime(request)
    if not await session_alive(runtime, _token(request)):
        return _html(login_page())
    page = await console_page(runtime, request.query_params.get("range", "7d"))
    return _html(console_html(page))


@post("/console/login")
async def console_login(request: Request[Any, Any, Any]) -> Response[str]:
    runtime = _runtime(request)
    try:
        form = await _form(request)
        token = await log_in(runtime, form.get("admin_key", ""))
    except GatewayError as error:
        return _html(login_page(error.message), error.status)
    return _to_console(_cookie(request, token, SESSION_SECONDS))


@post("/console/logout")
async def console_logout(request: Request[Any, Any, Any]) -> Response[str]:
    await log_out(_runtime(request), _token(request))
    return _to_console(_cookie(request, "", 0))


@post("/console/tenants")
async def console_create_tenant(request: Request[Any, Any, Any]) -> Response[str]:
    runtime = _runtime(request)
    if not await session_alive(runtime, _token(request)):
        return _to_console()
    try:
        form = await _form(request)
        body = NewTenant.model_validate({"id": form.get("id", "").strip(), **_limit_fields(form)})
        created = await runtime.tenancy.create_tenant(body, _actor(request))
    except GatewayError as error:
        return await _page_with(request, f"Not created: {error.message}", error.status)
    except ValueError as error:
        return await _page_with(request, f"Not created: {_first_problem(error)}", 400)
    return await _page_with(request, f"Tenant {created['id']} created.")


@post("/console/keys")
async def console_create_key(request: Request[Any, Any, Any]) -> Response[str]:
    runtime = _runtime(request)
    if not await session_alive(runtime, _token(request)):
        return _to_console()
    try:
        form = await _form(request)
        fields: dict[str, Any] = {
            "tenant": form.get("tenant", "").strip(),
            "id": form.get("id", "").strip(),
            **_limit_fields(form),
        }
        models = [m.strip() for m in form.get("models", "").split(",") if m.strip()]
        if models:
            fields["models"] = models
        issued = await runtime.tenancy.issue_key(NewKey.model_validate(fields), _actor(request))
    except GatewayError as error:
        return await _page_with(request, f"Not created: {error.message}", error.status)
    except ValueError as error:
        return await _page_with(request, f"Not created: {_first_problem(error)}", 400)
    return await _page_with(request, f"Key {issued['id']} created.", new_key=issued)


@post("/console/keys/{key_id:str}/revoke")
async def console_revoke_key(request: Request[Any, Any, Any], key_id: str) -> Response[str]:
    runtime = _runtime(request)
    if not await session_alive(runtime, _token(request)):
        return _to_console()
    try:
        await _form(request)
        await runtime.tenancy.revoke_key(key_id, _actor(request))
    except GatewayError as error:
        return await _page_with(request, f"Not revoked: {error.message}", error.status)
    return await _page_with(request, f"Key {key_id} revoked on every replica.")


async def _page_with(
    request: Request[Any, Any, Any],
    notice: str,
    status: int = 200,
    new_key: dict[str, Any] | None = None,
) -> Response[str]:
    page = await console_page(_runtime(request), "7d", new_key=new_key, notice=notice)
    return _html(console_html(page), status)


def _first_problem(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}"
    return str(error)


CONSOLE_HANDLERS = [
    console,
    console_login,
    console_logout,
    console_create_tenant,
    console_create_key,
    console_revoke_key,
]
