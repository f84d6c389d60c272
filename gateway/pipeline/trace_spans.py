"""A finished request's spans, described from its Flow and the times its trace noted
(pure: the exporter turns them into OpenTelemetry spans).

    <operation> <requested model>     SERVER  the request, in the caller's trace
      gateway.authenticate ... gateway.admit   INTERNAL, one per stage reached
      gateway.respond                 INTERNAL  dispatch and the answer sent
        <operation> <upstream model>  CLIENT    one per upstream attempt (retries too)
      gateway.settle                  INTERNAL

Attributes follow the OpenTelemetry GenAI semantic conventions (`gen_ai.*`: operation,
provider, request and response model, token usage, finish reasons, response id;
`server.address`/`server.port` and `error.type`), plus `gateway.*` for what only the
gateway knows (route, cost, tenant, retries). Never a key, a header or message text.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.observability.tracing import (
    AttemptTrace,
    Attribute,
    RequestTrace,
    SpanFacts,
    server_address,
)
from gateway.pipeline.flow import Flow
from gateway.settings.server import OFFICIAL_BASE_URLS, ProviderSettings
from gateway.wire.apis import OPENAI_COMPLETIONS, OPENAI_EMBEDDINGS

# the stages noted by pipeline/run.py, in order; `respond` includes dispatch. `cache`
# (the response cache's lookup) is noted only where a policy caches, and a hit ends there
STAGES = ("authenticate", "decode", "plan", "cache", "admit", "respond")

# gen_ai.provider.name's well-known values for the provider kinds we speak
_WELL_KNOWN_PROVIDERS = {"anthropic": "anthropic", "gemini": "gcp.gemini"}


def provider_names(providers: Mapping[str, ProviderSettings]) -> dict[str, str]:
    """gen_ai.provider.name per configured provider: the well-known value where the
    provider is one (OpenAI's own API, Anthropic, Gemini), else the configured name (a
    self-hosted SGLang pool, DeepSeek behind its OpenAI-compatible API)."""
    names = {}
    for name, settings in providers.items():
        if settings.kind == "openai":
            official = settings.base_url.rstrip("/") == OFFICIAL_BASE_URLS["openai"]
            names[name] = "openai" if official else name
        else:
            names[name] = _WELL_KNOWN_PROVIDERS.get(settings.kind, name)
    return names


def operation_name(api: str) -> str:
    if api == OPENAI_EMBEDDINGS:
        return "embeddings"
    if api == OPENAI_COMPLETIONS:
        return "text_completion"
    return "chat"


def request_spans(
    flow: Flow, trace: RequestTrace, settled: float, provider_names: Mapping[str, str]
) -> list[SpanFacts]:
    finished = flow.finished if flow.finished is not None else settled
    operation = operation_name(flow.api)
    answer = answer_facts(trace.answer)
    root = SpanFacts(
        name=f"{operation} {flow.requested_model}" if flow.requested_model else operation,
        kind="server",
        span_id=trace.root_span_id,
        parent_id=None,
        start=flow.started,
        end=settled,
        attributes=_root_attributes(flow, operation, answer, provider_names),
    )
    if flow.status >= 400 or flow.status == 0:
        root.error = _request_error(flow)
    stages = _stage_spans(flow, trace, finished)
    # settle takes over where the last stage ended (the request's own clean-up included)
    settle = SpanFacts(
        "gateway.settle",
        "internal",
        trace.new_span_id(),
        trace.root_span_id,
        stages[-1].end,
        settled,
        {"gateway.stage": "settle"},
    )
    spans = [root, *stages, settle]
    served = len(trace.attempts) - 1 if flow.served_by is not None else -1
    for index, attempt in enumerate(trace.attempts):
        spans.append(
            _attempt_span(
                flow, trace, attempt, operation, index == served, answer, finished, provider_names
            )
        )
    return spans


def _stage_spans(flow: Flow, trace: RequestTrace, finished: float) -> list[SpanFacts]:
    """One span per stage reached; the stage a refusal or failure ended in ends when the
    request did, with its error."""
    spans = []
    start = flow.started
    done = dict(trace.stages)
    for name in STAGES:
        end = done.get(name)
        if name == "cache" and end is None:
            continue
        span = SpanFacts(
            f"gateway.{name}",
            "internal",
            trace.respond_span_id if name == "respond" else trace.new_span_id(),
            trace.root_span_id,
            start,
            end if end is not None else finished,
            {"gateway.stage": name},
        )
        if end is None:
            span.error = _request_error(flow)
            spans.append(span)
            break
        if name == "cache":
            span.attributes["gateway.cache"] = flow.cache_status
            if flow.cache_status == "hit":
                spans.append(span)
                break
        spans.append(span)
        start = end
    return spans


def _root_attributes(
    flow: Flow, operation: str, answer: AnswerFacts, provider_names: Mapping[str, str]
) -> dict[str, Attribute]:
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": operation,
        "http.request.method": "POST",
        "http.response.status_code": flow.status,
        "gateway.request_id": flow.request_id,
        "gateway.api": flow.api,
    }
    if flow.requested_model:
        attributes["gen_ai.request.model"] = flow.requested_model
    request = flow.request
    if request is not None:
        attributes["gateway.stream"] = request.stream
        limit = request.output_limit
        if limit is not None:
            attributes["gen_ai.request.max_tokens"] = limit
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if request.top_p is not None:
            attributes["gen_ai.request.top_p"] = request.top_p
    if flow.caller is not None:
        attributes["gateway.tenant"] = flow.caller.tenant_id
    if flow.route:
        attributes["gateway.route"] = flow.route
    if flow.route_reason or flow.panic:
        attributes["gateway.route.reason"] = "panic" if flow.panic else flow.route_reason
    if flow.route_score is not None:
        attributes["gateway.route.score"] = flow.route_score
    if flow.served_by is not None:
        attributes["gateway.model"] = flow.served_by.model
        attributes["gateway.deployment"] = flow.served_by.deployment_id
        attributes["gateway.provider"] = flow.provider
        attributes["gen_ai.provider.name"] = provider_names.get(flow.provider, flow.provider)
        _answer_attributes(attributes, flow, answer)
    if flow.cost is not None:
        attributes["gateway.cost_usd"] = float(flow.cost)
    if flow.cache_status:
        attributes["gateway.cache"] = flow.cache_status
    attributes["gateway.attempts"] = flow.attempts
    if flow.retries:
        attributes["gateway.retries"] = flow.retries
    if flow.fallback_from:
        attributes["gateway.fallback_from"] = list(flow.fallback_from)
    if flow.skipped:
        attributes["gateway.skipped"] = list(flow.skipped)
    return attributes


def _answer_attributes(attributes: dict[str, Attribute], flow: Flow, answer: AnswerFacts) -> None:
    if answer.model:
        attributes["gen_ai.response.model"] = answer.model
    if answer.id:
        attributes["gen_ai.response.id"] = answer.id
    if answer.finish_reasons:
        attributes["gen_ai.response.finish_reasons"] = answer.finish_reasons
    usage = flow.usage
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if usage.cached_input_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
        if usage.cache_write_tokens:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.estimated:
            attributes["gateway.usage.estimated"] = True


def _attempt_span(
    flow: Flow,
    trace: RequestTrace,
    attempt: AttemptTrace,
    operation: str,
    served: bool,
    answer: AnswerFacts,
    finished: float,
    provider_names: Mapping[str, str],
) -> SpanFacts:
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider_names.get(attempt.provider, attempt.provider),
        "gen_ai.request.model": attempt.upstream_model,
        "gateway.provider": attempt.provider,
        "gateway.model": attempt.model,
        "gateway.attempt": attempt.number,
    }
    if attempt.url:
        host, port = server_address(attempt.url)
        attributes["server.address"] = host
        if port is not None:
            attributes["server.port"] = port
    end = attempt.end
    if served:
        _answer_attributes(attributes, flow, answer)
        if end is None:
            upstream_started = flow.upstream_started
            end = upstream_started + flow.upstream_seconds if upstream_started else finished
    span = SpanFacts(
        f"{operation} {attempt.upstream_model}",
        "client",
        attempt.span_id,
        trace.respond_span_id,
        attempt.start,
        end if end is not None else finished,
        attributes,
    )
    if attempt.failure is not None:
        span.error = attempt.failure
    elif not served:
        # ended by something else than an upstream error (the client left, a pool full)
        span.error = _request_error(flow) if flow.status != 200 else "_OTHER"
    elif flow.status >= 400:
        # the stream broke after it started
        span.error = _request_error(flow)
    return span


def _request_error(flow: Flow) -> str:
    if flow.client_disconnected:
        return "client_disconnected"
    if flow.error_code:
        return flow.error_code
    return str(flow.status) if flow.status else "_OTHER"


class AnswerFacts(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    finish_reasons: list[str] = msgspec.field(default_factory=list)


class _Choice(msgspec.Struct):
    finish_reason: str | None = None


class _Inner(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    status: str | None = None


class _Piece(msgspec.Struct):
    """The fields of an answer (or stream event) that name it, in every API we answer
    in: OpenAI chat/completions (choices[].finish_reason), Anthropic (stop_reason; its
    message_start's `message`, message_delta's `delta`), Responses (status; its
    events' `response`)."""

    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    stop_reason: str | None = None
    status: str | None = None
    message: _Inner | None = None
    response: _Inner | None = None
    # Anthropic's is an object, the Responses API's a string
    delta: msgspec.Raw = msgspec.Raw()


_piece = msgspec.json.Decoder(_Piece)
_inner = msgspec.json.Decoder(_Inner)


def answer_facts(pieces: list[bytes]) -> AnswerFacts:
    """The answer's id, model and finish reasons, from its body or its stream's first
    and last payloads; what cannot be read is left out."""
    facts = AnswerFacts()
    for raw in pieces:
        try:
            piece = _piece.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        for named in (piece, piece.message, piece.response):
            if named is None:
                continue
            if named.id and facts.id is None:
                facts.id = named.id
            if named.model and facts.model is None:
                facts.model = named.model
        reasons = [c.finish_reason for c in piece.choices or () if c.finish_reason]
        for source in (piece, piece.message, piece.response, _delta(piece.delta)):
            if source is None:
                continue
            if source.stop_reason:
                reasons.append(source.stop_reason)
            elif source.status and source.status not in ("in_progress", "queued"):
                reasons.append(source.status)
        if reasons:
            facts.finish_reasons = reasons
    return facts


def _delta(raw: msgspec.Raw) -> _Inner | None:
    if not bytes(raw).startswith(b"{"):
        return None
    try:
        return _inner.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
