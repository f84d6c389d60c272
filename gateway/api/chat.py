"""POST /v1/chat/completions as a raw ASGI handler: the hot path, kept free of
framework machinery so each request costs what the pipeline costs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec

from gateway.api.asgi_io import (
    ClientGone,
    RawHeaders,
    Receive,
    Scope,
    Send,
    parse_content_length,
    read_body,
    send_bytes,
    send_error,
)
from gateway.errors import GatewayError, InternalError, UpstreamError
from gateway.limits import holding
from gateway.pipeline.dispatch import OpenStream
from gateway.pipeline.flow import Flow
from gateway.pipeline.parse import parse_chat_request
from gateway.pipeline.plan import plan_request
from gateway.pipeline.runtime import GatewayRuntime
from gateway.providers.base import Call, StreamTranslation
from gateway.providers.openai_compatible import OpenAICompatibleStream
from gateway.providers.sse import SSEEvent, SSEParser

log = logging.getLogger("gateway.chat")

_SSE_HEADERS: RawHeaders = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_DONE = b"data: [DONE]\n\n"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


def _gateway_headers(flow: Flow) -> RawHeaders:
    out: RawHeaders = [(b"x-request-id", flow.request_id.encode())]
    if flow.served_by is not None:
        out.append((b"x-gateway-model", flow.served_by.model.encode()))
        out.append((b"x-gateway-provider", flow.provider.encode()))
    if flow.route:
        out.append((b"x-gateway-route", flow.route_header().encode("latin-1", "replace")))
    out.extend((k.encode(), v.encode()) for k, v in flow.headers.items())
    return out


async def chat_completions(
    runtime: GatewayRuntime, scope: Scope, receive: Receive, send: Send
) -> None:
    headers = _headers(scope)
    now = time.time()
    flow = Flow(
        request_id=runtime.request_ids.new(headers),
        started=time.perf_counter(),
        created=int(now),
        view=runtime.view,
    )
    try:
        if scope["method"] != "POST":
            flow.status = 405
            await send_bytes(
                send,
                405,
                b'{"error":{"message":"Use POST for /v1/chat/completions.",'
                b'"type":"invalid_request_error","param":null,"code":"method_not_allowed"}}',
                [(b"allow", b"POST"), *_gateway_headers(flow)],
            )
            return
        await _serve(runtime, flow, headers, receive, send)
    except ClientGone:
        flow.client_disconnected = True
        flow.status = 499
    except GatewayError as error:
        flow.status = error.status
        flow.error_code = error.code
        close = error.status == 413
        await send_error(send, runtime.redactor.error(error), _gateway_headers(flow), close=close)
    except Exception:
        log.exception("unexpected error serving request %s", flow.request_id)
        flow.status = 500
        internal = InternalError(
            f"The gateway failed to serve this request; quote request id {flow.request_id}."
        )
        await send_error(send, internal, _gateway_headers(flow))
    finally:
        runtime.settle(flow)


async def _serve(
    runtime: GatewayRuntime, flow: Flow, headers: dict[str, str], receive: Receive, send: Send
) -> None:
    flow.caller = flow.view.keys.authenticate(headers.get("authorization"))
    limit = runtime.settings.config.server.max_body_bytes
    body = await read_body(receive, parse_content_length(headers.get("content-length")), limit)
    flow.request, flow.raw = parse_chat_request(body)
    plan_request(flow, headers, runtime.tenant_state(flow.caller), runtime.live_stats.snapshot())
    runtime.metrics.request_started(flow.route)
    flow.counted_in_flight = True
    await runtime.admitter.admit(flow)
    leases = flow.admission.leases if flow.admission is not None else ()
    # the leases are freed with the request's settlement (runtime.settle), one round trip
    async with holding(runtime.limit_store, leases, release=False):
        await _respond(runtime, flow, receive, send)


async def _respond(runtime: GatewayRuntime, flow: Flow, receive: Receive, send: Send) -> None:
    assert flow.request is not None and flow.raw is not None
    call = Call(flow.request, flow.raw, flow.request.model, flow.request_id, flow.created)
    if flow.request.stream:
        await _stream(runtime, flow, call, receive, send)
        return
    translated = await runtime.dispatcher.complete(flow, call)
    flow.upstream_seconds = time.perf_counter() - (flow.upstream_started or flow.started)
    flow.usage = translated.usage
    runtime.price(flow)
    flow.status = 200
    await send_bytes(send, 200, translated.body, _gateway_headers(flow))


async def _stream(
    runtime: GatewayRuntime, flow: Flow, call: Call, receive: Receive, send: Send
) -> None:
    opened = await runtime.dispatcher.open_stream(flow, call)
    flow.status = 200
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*_SSE_HEADERS, *_gateway_headers(flow)],
        }
    )
    pump = asyncio.ensure_future(_pump(runtime, flow, call, opened, send))
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait((pump, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not pump.done():
            flow.client_disconnected = True
            flow.status = 499
            pump.cancel()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        flow.usage = opened.translation.usage or flow.usage
        _count_content(flow, opened.translation)
        flow.upstream_seconds = time.perf_counter() - (flow.upstream_started or flow.started)


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _pump(
    runtime: GatewayRuntime, flow: Flow, call: Call, opened: OpenStream, send: Send
) -> None:
    """Upstream bytes -> SSE events -> OpenAI chunks -> client, one read at a time."""
    parser = SSEParser()
    translation = opened.translation
    ended_by: BaseException | None = None
    try:
        try:
            async for chunk in opened.response.iter_bytes():
                payloads, failure = _translate(translation, parser.feed(chunk))
                if payloads:
                    flow.streamed_chunks += len(payloads)
                    if flow.first_token_at is None:
                        flow.first_token_at = time.perf_counter()
                    body = b"".join(b"data: " + p + b"\n\n" for p in payloads)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                if failure is not None:
                    raise failure
            tail, failure = _translate(translation, parser.flush())
            if failure is not None:
                raise failure
            tail.extend(_final_chunks(runtime, flow, call, translation, translation.finish()))
        except UpstreamError as error:
            ended_by = error
            if not error.provider:
                error.provider = opened.target.provider
            flow.status = error.status
            flow.error_code = error.code
            log.warning(
                "stream from %s failed mid-way: %s",
                opened.target.provider,
                runtime.redactor.text(error.message),
            )
            tail = [runtime.redactor.error(error).to_json()]
        body = b"".join(b"data: " + p + b"\n\n" for p in tail) + _DONE
        await send({"type": "http.response.body", "body": body, "more_body": False})
    finally:
        await opened.response.close()
        opened.finish(ended_by)


def _count_content(flow: Flow, translation: StreamTranslation) -> None:
    if isinstance(translation, OpenAICompatibleStream):
        flow.content_chunks = translation.content_chunks


def _translate(
    translation: StreamTranslation, events: list[SSEEvent]
) -> tuple[list[bytes], UpstreamError | None]:
    """The payloads of one network read's events, and the error an event reported.

    Events before an error event in the same read still reach the client: whether they
    arrive in one read or several is up to the network, and must not change the answer.
    """
    payloads: list[bytes] = []
    for event in events:
        try:
            payloads.extend(translation.feed(event))
        except UpstreamError as error:
            return payloads, error
    return payloads, None


def _final_chunks(
    runtime: GatewayRuntime,
    flow: Flow,
    call: Call,
    translation: StreamTranslation,
    finish: list[bytes],
) -> list[bytes]:
    """The usage chunk goes to the client only if it asked for it, with the cost in an
    `x_gateway` extension field (clients that do not know it ignore it)."""
    flow.usage = translation.usage or flow.usage
    _count_content(flow, translation)
    runtime.price(flow)
    if not call.request.wants_usage_chunk:
        return []
    if finish:
        chunk = msgspec.json.decode(finish[-1])
    else:
        # the upstream sent no usage: report the gateway's own count, marked estimated
        chunk = {
            "id": "chatcmpl-" + flow.request_id,
            "object": "chat.completion.chunk",
            "created": flow.created,
            "model": call.client_model,
            "choices": [],
        }
    if flow.usage is not None:
        chunk["usage"] = flow.usage.to_openai()
    chunk["x_gateway"] = {
        "cost_usd": str(flow.cost) if flow.cost is not None else None,
        "estimated": bool(flow.usage and flow.usage.estimated),
    }
    return [*finish[:-1], msgspec.json.encode(chunk)]
