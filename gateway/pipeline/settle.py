"""Settle stage, after the response: the request's cost (if the answer never completed,
so respond could not price it), its limits settled and leases freed, its ledger record,
metrics, live stats and access log line.

It runs once per request whatever happened (served, refused, failed, abandoned), and
never raises into the request path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from gateway.metering.ledger import LedgerWriter
from gateway.metering.ledger_record import LedgerRecord
from gateway.observability.content import loggable_messages
from gateway.observability.logs import AccessLog, RequestLogEntry, redact
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.refusals import RecentRefusals, Refusal
from gateway.observability.tracing import Tracer
from gateway.pipeline.admit import Admitter
from gateway.pipeline.flow import Flow
from gateway.pipeline.live_stats import LiveStatsTracker
from gateway.pipeline.pricing import Pricer
from gateway.pipeline.trace_spans import request_spans
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_EMBEDDINGS

log = logging.getLogger("gateway.settle")

_NO_TOKENS = Usage()


class Settler:
    def __init__(
        self,
        pricer: Pricer,
        metrics: GatewayMetrics,
        live_stats: LiveStatsTracker,
        access_log: AccessLog,
        provider_names: Mapping[str, str] | None = None,
        refusals: RecentRefusals | None = None,
    ) -> None:
        self._pricer = pricer
        # the newest 4xx/5xx answers, for the operator's views (the ledger holds spend)
        self._refusals = refusals
        self._metrics = metrics
        self._live_stats = live_stats
        self._access_log = access_log
        # gen_ai.provider.name per configured provider, for the spans
        self._provider_names = provider_names or {}

    def settle(
        self, flow: Flow, admitter: Admitter, ledger: LedgerWriter, tracer: Tracer | None = None
    ) -> None:
        flow.finished = time.perf_counter()
        try:
            if flow.cost is None:
                self._pricer.price(flow)
        except Exception:
            log.exception("pricing request %s failed", flow.request_id)
        if flow.admission is not None:
            # before anything else can fail: the settlement also frees the concurrency slots
            try:
                admitter.settle_later(flow)
            except Exception:
                log.exception("settling limits for request %s failed", flow.request_id)
        try:
            record_metrics(self._metrics, flow, flow.finished)
            observe_live_stats(self._live_stats, flow)
            record_spend(ledger, flow)
            write_access_log(self._access_log, flow, flow.finished)
            if self._refusals is not None and flow.status >= 400 and not flow.spend_recorded:
                self._refusals.add(refusal_of(flow))
        except Exception:
            log.exception("settling request %s failed", flow.request_id)
        trace = flow.trace
        # an unsampled trace only passed its context on: nothing to build
        if trace is not None and tracer is not None and trace.sampled:
            try:
                spans = request_spans(flow, trace, time.perf_counter(), self._provider_names)
                tracer.export(trace, spans)
            except Exception:
                log.exception("tracing request %s failed", flow.request_id)


def observe_live_stats(live_stats: LiveStatsTracker, flow: Flow) -> None:
    if flow.served_by is None or flow.status != 200 or flow.upstream_started is None:
        return
    # a non-streamed answer's first token arrives with the whole answer
    first = flow.first_token_at if flow.first_token_at is not None else flow.finished
    ttft = (first or flow.upstream_started) - flow.upstream_started
    output = flow.usage.output_tokens if flow.usage else 0
    live_stats.observe(flow.served_by.deployment_id, flow.route, ttft, output)


def record_spend(ledger: LedgerWriter, flow: Flow, finished: float | None = None) -> None:
    """One ledger record per request an upstream served (also a stream the client
    abandoned: what was generated is billed), and per answer from the response cache
    (no tokens, cost 0, what it saved), once: a complete answer's record is made before
    its last bytes are sent (`finished` then is that moment), the others here."""
    candidate = flow.served_by
    usage = flow.usage
    if usage is None and flow.cache_saved_usd is not None:
        usage = _NO_TOKENS  # a hit: the upstream spent nothing on it
    if (
        flow.spend_recorded
        or candidate is None
        or flow.caller is None
        or usage is None
        or flow.cost is None
    ):
        return
    ended = finished or flow.finished or flow.started
    ledger.record(
        LedgerRecord.settled(
            time=time.time(),
            request_id=flow.request_id,
            tenant=flow.caller.tenant_id,
            key_id=flow.caller.key_id,
            model=candidate.model,
            provider=flow.provider,
            deployment=candidate.deployment_id,
            status=flow.status,
            usage=usage,
            cost=flow.cost,
            route=flow.route,
            latency_ms=(ended - flow.started) * 1000,
            ttft_ms=(
                (flow.first_token_at - flow.started) * 1000
                if flow.first_token_at is not None
                else None
            ),
            retries=flow.retries,
            fallback_from=",".join(flow.fallback_from),
            route_score=flow.route_score,
            route_threshold=flow.route_threshold,
            route_scorer=flow.route_scorer,
            record_id=flow.record_id,
            cache=flow.cache_status,
            saved_usd=flow.cache_saved_usd,
            kind=flow.ledger_kind,
            # the names are the client's (fields, betas, tools): masked where key-shaped
            changed=redact(",".join(flow.changes)) if flow.changes else "",
        )
    )
    flow.spend_recorded = True


def refusal_of(flow: Flow) -> Refusal:
    """A request answered with an error and no spend: who, where, what and why."""
    caller = flow.caller
    served_by = flow.served_by
    return Refusal(
        time=time.time(),
        request_id=flow.request_id,
        status=flow.status,
        code=flow.error_code or ("client_closed" if flow.status == 499 else ""),
        reason=_with_changes(flow.error_message or "", flow.changes),
        tenant=caller.tenant_id if caller else "",
        key_id=caller.key_id if caller else "",
        # the route it was planned on, else the model it asked for (an unknown one too)
        route=flow.route or flow.requested_model or (flow.request.model if flow.request else ""),
        model=served_by.model if served_by else "",
    )


def _with_changes(reason: str, changes: list[str]) -> str:
    """The refusal's reason, and what the gateway had changed in the request it sent
    (an upstream's refusal of a clamped or translated request reads differently)."""
    if not changes:
        return reason
    # the names are the client's (fields, betas, tools): masked where key-shaped
    return f"{reason} (changed={redact(','.join(changes))})"


def record_metrics(metrics: GatewayMetrics, flow: Flow, finished: float) -> None:
    """The request's metrics in one call: the request (when it was counted in flight), and
    when an upstream served it the routing decision, fallbacks, tokens, spend and the mean
    gap between streamed chunks."""
    served_by = flow.served_by
    request = flow.request
    stream = bool(request and request.stream)
    first = flow.first_token_at
    caller = flow.caller
    metrics.request_settled(
        flow.route or "none",
        served_by.model if served_by else None,
        flow.provider or None,
        caller.tenant_id if caller else "none",
        flow.status,
        stream,
        flow.counted_in_flight,
        finished - flow.started,
        first - flow.started if first is not None else None,
        flow.upstream_seconds if flow.upstream_started is not None else None,
        flow.usage,
        flow.cost,
        flow.fallback_from,
        (finished - first) / (flow.streamed_chunks - 1)
        if stream and first is not None and flow.streamed_chunks > 1
        else None,
    )


def log_entry(flow: Flow, finished: float) -> RequestLogEntry:
    usage = flow.usage
    caller = flow.caller
    served_by = flow.served_by
    request = flow.request
    started = flow.started
    first = flow.first_token_at
    fallback_from = flow.fallback_from
    if usage is not None:
        tokens = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
            usage.estimated,
        )
    else:
        tokens = (0, 0, 0, 0, False)
    # positional, in field order (a keyword argument costs msgspec ~500 instructions, and
    # this runs on every request); LOG_ENTRY_FIELDS in the settle tests pins the order
    return RequestLogEntry(
        flow.request_id,  # request_id
        flow.status,  # status
        round((finished - started) * 1000, 3),  # latency_ms
        caller.tenant_id if caller else None,  # tenant
        caller.key_id if caller else None,  # key_id
        flow.route or None,  # route
        served_by.model if served_by else (flow.requested_model or None),  # model
        flow.provider or None,  # provider
        served_by.deployment_id if served_by else None,  # deployment
        bool(request and request.stream),  # stream
        tokens[0],  # input_tokens
        tokens[1],  # output_tokens
        tokens[2],  # cached_tokens
        tokens[3],  # reasoning_tokens
        bool(tokens[4]),  # tokens_estimated
        flow.cost,  # cost_usd
        round((first - started) * 1000, 3) if first is not None else None,  # ttft_ms
        round(flow.upstream_seconds * 1000, 3) if flow.upstream_started else None,  # upstream_ms
        flow.retries,  # retries
        bool(fallback_from),  # fallback
        ",".join(fallback_from) or None,  # fallback_from
        None,  # fallback_reason
        ",".join(flow.failed_attempts) or None,  # attempts
        ",".join(flow.skipped) or None,  # skipped
        flow.panic,  # panic
        flow.cache_status or None,  # cache
        ",".join(flow.changes) or None,  # changed
        None,  # error_type
        flow.error_code,  # error_code
    )


def write_access_log(access_log: AccessLog, flow: Flow, finished: float) -> None:
    entry = log_entry(flow, finished)
    request = flow.request
    # `log_content` first: with content logging off (the default) nothing else is asked
    if (
        access_log.log_content
        and request is not None
        and flow.api != OPENAI_EMBEDDINGS
        and access_log.wants_content()
    ):
        # the request's messages as the pipeline holds them (chat form, whatever API the
        # client spoke; embedding inputs are not a conversation): the input
        # `gateway route label --from-access-log` reads; attachments' payloads left out
        entry.content = {"messages": loggable_messages(request.messages)}
    access_log.request(entry)
