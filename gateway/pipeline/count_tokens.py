"""`POST /v1/messages/count_tokens`: Anthropic's free token count of a Messages prompt.

Authenticated like any request (the same keys, the same model allow-lists) and planned
like one, to find the deployment the prompt would be sent to; neither admitted (no rate
limit, no budget reservation), metered nor written to the ledger. Anthropic does not
bill the count and limits it apart from Messages, so the gateway's own limits, which
guard generation, leave it alone.

- Planned onto an Anthropic deployment, the count is Anthropic's own: the client's body
  goes to that deployment's `/v1/messages/count_tokens`, forwarded as a Messages request
  is (the deployment's model and key, the client's `anthropic-version`, its allowed
  `anthropic-beta` values), and its answer comes back as it came. It equals the input
  tokens the same prompt is then billed.
- Planned anywhere else, or when Anthropic's count fails (timeout, network, 5xx, 429,
  refused credentials), the count is the gateway's own offline one with the model's
  configured tokenizer: an estimate for every model whose tokenizer is not published.
  An Anthropic refusal of the request itself (400, 413) is the answer: the same prompt
  would be refused by Messages too.

`x-gateway-token-count` says which: `upstream` or `estimate`. The body is Anthropic's
shape either way (`{"input_tokens": N}`), so its SDK parses both.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.admin.client_keys import Caller
from gateway.errors import (
    GatewayError,
    MethodNotAllowed,
    NotFound,
    PermissionDenied,
    UpstreamError,
)
from gateway.ingress import anthropic_messages as codec
from gateway.pipeline import prompt_size
from gateway.pipeline.connection import ClientConnection
from gateway.pipeline.flow import Flow, ServingOption
from gateway.pipeline.plan import plan_request
from gateway.pipeline.respond import JSON_HEADERS
from gateway.providers import anthropic_native
from gateway.providers.anthropic import AnthropicTranslation
from gateway.routing.kinds import request_kind
from gateway.wire.apis import ANTHROPIC_MESSAGES

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime

log = logging.getLogger("gateway.count_tokens")

COUNT_SOURCE_HEADER = "x-gateway-token-count"
# statuses with which Anthropic refuses the prompt itself, not the gateway or its load
_REFUSALS = (400, 413)


async def serve_count_tokens(
    runtime: GatewayRuntime, method: str, headers: Mapping[str, str], connection: ClientConnection
) -> None:
    request_id = runtime.request_ids.new(headers)
    status, extra = 200, {}
    try:
        if method != "POST":
            raise MethodNotAllowed(
                "Use POST for /v1/messages/count_tokens.", headers={"allow": "POST"}
            )
        body, source = await count_tokens_answer(
            runtime,
            headers,
            await connection.read_body(runtime.settings.config.server.max_body_bytes),
            request_id,
        )
        extra = {COUNT_SOURCE_HEADER: source}
    except GatewayError as error:
        error = runtime.redactor.error(error)
        status, extra, body = error.status, error.response_headers(), codec.error_body(error)
    await connection.start(
        status,
        [
            *JSON_HEADERS,
            (b"content-length", str(len(body)).encode()),
            (b"request-id", request_id.encode()),
            (b"x-request-id", request_id.encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()),
        ],
    )
    await connection.send(body, more=False)


async def count_tokens_answer(
    runtime: GatewayRuntime, headers: Mapping[str, str], body: bytes, request_id: str = ""
) -> tuple[bytes, str]:
    """The answer's body and where its count came from (`upstream` or `estimate`)."""
    view = runtime.view
    caller = view.keys.authenticate(codec.api_key(headers))
    native = codec.decode_json(body, max_depth=runtime.settings.config.server.max_json_depth)
    request = codec.parse_count_tokens(native)
    found = view.model(request.model)
    if found is None and request.model not in view.policy.routes:
        raise NotFound(f"The model '{request.model}' does not exist.", param="model")
    if not view.allows(caller.key.models, request.model):
        raise PermissionDenied(f"This key may not use the model '{request.model}'.", param="model")
    option = await planned_deployment(runtime, caller, native, headers, request_id)
    providers = runtime.settings.config.providers
    if option is not None and providers[option.deployment.provider].kind == "anthropic":
        counted = await upstream_count(runtime, option, body, headers, request.model)
        if counted is not None:
            return counted, "upstream"
    if option is not None:
        tokenizer = option.settings.tokenizer
    else:
        tokenizer = found[1].tokenizer if found is not None else "cl100k"
    return codec.count_tokens_body(codec.count_tokens(native, tokenizer)), "estimate"


async def planned_deployment(
    runtime: GatewayRuntime,
    caller: Caller,
    native: dict[str, Any],
    headers: Mapping[str, str],
    request_id: str,
) -> ServingOption | None:
    """The deployment a Messages request with this prompt would go to first, planned as
    the pipeline plans one (None when it cannot be planned: the offline count answers)."""
    flow = Flow(
        request_id=request_id,
        started=time.perf_counter(),
        created=int(time.time()),
        view=runtime.view,
        api=ANTHROPIC_MESSAGES,
        caller=caller,
        request=codec.count_tokens_request(native),
    )
    try:
        await prompt_size.before_planning(runtime.prompt_counter, flow, headers)
        await plan_request(
            flow,
            headers,
            runtime.budget_use.state_of(caller.tenant_id),
            runtime.live_stats.snapshot(),
            runtime.scoring,
            request_kind=request_kind,
        )
    except GatewayError as error:
        log.info("count_tokens %s not planned (%s): counted offline", request_id, error.message)
        return None
    return flow.candidates[0] if flow.candidates else None


async def upstream_count(
    runtime: GatewayRuntime,
    option: ServingOption,
    body: bytes,
    headers: Mapping[str, str],
    client_model: str,
) -> bytes | None:
    """Anthropic's own count answer for the client's body, None when it could not be had
    (the caller falls back to the offline count); raises Anthropic's refusal of the
    request itself."""
    target = runtime.dispatcher.target_for(option)
    upstream = anthropic_native.count_tokens_request(body, headers, client_model, target)
    try:
        async with asyncio.timeout(target.settings.timeouts.total):
            response = await runtime.transport.send(target.provider, upstream)
            answer = await response.read()
    except (UpstreamError, TimeoutError) as error:
        cause = error.message if isinstance(error, UpstreamError) else "timed out"
        log.warning(
            "count_tokens on provider '%s' failed (%s): counted offline", target.provider, cause
        )
        return None
    if response.status >= 400:
        refusal = AnthropicTranslation().map_error(
            response.status, answer, response.headers, target
        )
        if response.status in _REFUSALS:
            raise refusal
        log.warning(
            "count_tokens on provider '%s' answered %d (%s): counted offline",
            target.provider,
            response.status,
            refusal.message,
        )
        return None
    if anthropic_native.read_token_count(answer) is None:
        log.warning(
            "count_tokens on provider '%s' answered no count: counted offline", target.provider
        )
        return None
    return answer
