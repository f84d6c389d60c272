"""One request through the stages, in order, whatever API the client spoke:

    authenticate -> decode -> (resume a stored conversation) -> plan
    -> (answer from the response cache) -> admit -> (dispatch + respond) -> settle
    -> evaluate (an opted-in tenant's answer noted, and queued when sampled)

A stage that refuses the request raises a GatewayError; it is answered in the client's
API (redacted of every provider secret), and settle runs however the request ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.errors import AuthenticationFailed, GatewayError, InternalError, MethodNotAllowed
from gateway.ingress.base import IngressCodec
from gateway.pipeline import prompt_size
from gateway.pipeline.authenticate import authenticate, authenticate_after_catching_up
from gateway.pipeline.connection import ClientConnection, ClientGone
from gateway.pipeline.decode import decode
from gateway.pipeline.flow import Flow
from gateway.pipeline.plan import plan_request
from gateway.pipeline.respond import JSON_HEADERS, gateway_headers
from gateway.routing.kinds import request_kind

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime

log = logging.getLogger("gateway.pipeline")


async def serve(
    runtime: GatewayRuntime,
    codec: IngressCodec,
    method: str,
    path: str,
    headers: Mapping[str, str],
    connection: ClientConnection,
) -> None:
    """Serve one request to `path`; `headers` have lower-case names."""
    request_id, record_id = runtime.request_ids.new_pair(headers)
    flow = Flow(
        request_id=request_id,
        record_id=record_id,
        started=time.perf_counter(),
        created=int(time.time()),
        view=runtime.view,
        api=codec.api,
    )
    tracer = runtime.tracer
    # tracing off costs a request an `is None` test per stage; on, each stage's end is noted
    trace = flow.trace = tracer.begin(headers, flow.started) if tracer is not None else None
    try:
        if method != "POST":
            raise MethodNotAllowed(f"Use POST for {path}.", headers={"allow": "POST"})
        try:
            authenticate(flow, codec, headers)
        except AuthenticationFailed as refused:
            await authenticate_after_catching_up(
                flow, codec, headers, refused, runtime.view_after_catching_up
            )
        if trace is not None:
            trace.stage_done("authenticate")
        max_body = runtime.settings.config.server.max_body_bytes
        await decode(flow, codec, connection, headers, max_body)
        await runtime.conversation.resume(flow)
        assert flow.caller is not None and flow.request is not None
        if trace is not None:
            trace.stage_done("decode")
        # counted only where the plan depends on it, off the event loop when large
        await prompt_size.before_planning(runtime.prompt_counter, flow, headers)
        tenant_state = runtime.budget_use.state_of(flow.caller.tenant_id)
        await plan_request(
            flow,
            headers,
            tenant_state,
            runtime.live_stats.snapshot(),
            runtime.scoring,
            request_kind=request_kind,
        )
        if trace is not None:
            trace.stage_done("plan")
        if runtime.evaluation.active:
            runtime.evaluation.sample(flow)
        runtime.metrics.request_started(flow.route)
        if flow.quality_status:
            runtime.metrics.route_quality(flow.route, flow.quality_status)
        flow.counted_in_flight = True
        # a hit is served here: no admission (it costs the upstream nothing), no dispatch.
        # Without any `cache:` block in the policy the stage is not even called
        cached = flow.view.caching and await runtime.response_cache.answer(
            flow, codec, connection, headers
        )
        if trace is not None and flow.view.caching:
            trace.stage_done("cache")
        if not cached:
            await runtime.admitter.admit(flow)
            if trace is not None:
                trace.stage_done("admit")
            async with runtime.admitter.holding(flow):
                await runtime.responder.respond(flow, codec, connection)
            if trace is not None:
                trace.stage_done("respond")
    except ClientGone:
        flow.client_disconnected = True
        flow.status = 499
    except GatewayError as error:
        await _refuse(runtime, flow, codec, connection, error)
    except Exception:
        log.exception("unexpected error serving request %s", flow.request_id)
        internal = InternalError(
            f"The gateway failed to serve this request; quote request id {flow.request_id}."
        )
        await _refuse(runtime, flow, codec, connection, internal)
    finally:
        runtime.settler.settle(flow, runtime.admitter, runtime.ledger, tracer)
        if flow.evaluation_plan is not None:
            runtime.evaluation.after(flow)


async def _refuse(
    runtime: GatewayRuntime,
    flow: Flow,
    codec: IngressCodec,
    connection: ClientConnection,
    error: GatewayError,
) -> None:
    flow.status = error.status
    flow.error_code = error.code
    if connection.response_started:
        await connection.send(b"", more=False)
        return
    body = codec.error_body(runtime.redactor.error(error))
    flow.error_message = error.message
    headers = [
        *JSON_HEADERS,
        (b"content-length", str(len(body)).encode()),
        *gateway_headers(flow),
        *((k.encode("latin-1"), v.encode("latin-1")) for k, v in error.response_headers().items()),
    ]
    if error.status == 413:
        # the rest of an oversized body is not read: the connection cannot be reused
        headers.append((b"connection", b"close"))
    await connection.start(error.status, headers)
    await connection.send(body, more=False)
