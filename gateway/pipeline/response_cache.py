"""Response cache stage, between plan and admit: an exact repeat of a request this tenant
sent before (same API, same planned model, same body: see cache/key.py) is
answered from the cache, and a miss has its answer kept before its last bytes go out.

Where it sits is the design: after plan, so the model is chosen (and the key's access
to it checked); before admit, so a hit takes no rate-limit tokens, no concurrency lease
and no budget reservation (it costs the upstream nothing). A hit is priced at 0; its
ledger record says `cache: hit` and carries `saved_usd`, what the answer cost when it was
served.

On only where a route's or a key's `cache:` block says so (a key's block wins). The
client may ask for less per request: `x-gateway-cache: bypass` (neither read nor
written), `Cache-Control: no-cache` (not read, the fresh answer stored),
`Cache-Control: no-store` (not stored). The response says what happened in
`x-gateway-cache`: hit, miss or bypass. A store that does not answer is a miss ("miss;
store unavailable"): the cache never fails a request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

from gateway.cache.answer_store import AnswerCacheStore, CacheUnavailable
from gateway.cache.cached_answer import CachedAnswer, decode_answer, encode_answer
from gateway.cache.key import cache_key, request_digest
from gateway.cache.recording import AnswerRecording
from gateway.ingress.anthropic_messages import NativeBody
from gateway.ingress.base import IngressCodec
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.connection import ClientConnection
from gateway.pipeline.flow import Flow
from gateway.pipeline.respond import (
    JSON_HEADERS,
    SSE_HEADERS,
    context,
    gateway_headers,
    report_answered,
)
from gateway.settings.response_cache import CacheSettings
from gateway.usage import Usage

log = logging.getLogger("gateway.cache")

CACHE_HEADER = "x-gateway-cache"
UNAVAILABLE = "miss; store unavailable"
_ZERO = Decimal(0)


def cache_settings(flow: Flow) -> CacheSettings | None:
    """The `cache:` block that applies to this request: its key's, else its route's."""
    assert flow.caller is not None
    settings = flow.caller.key.cache
    if settings is None:
        route = flow.view.policy.routes.get(flow.route)
        settings = route.cache if route is not None else None
    return settings if settings is not None and settings.enabled else None


def client_wishes(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """(may read, may write) as the request's headers allow."""
    if headers.get(CACHE_HEADER, "").strip().lower() == "bypass":
        return False, False
    control = headers.get("cache-control")
    if not control:
        return True, True
    directives = {part.strip().lower() for part in control.split(",")}
    return "no-cache" not in directives, "no-store" not in directives


def answer_headers(native: Mapping[str, Any]) -> Mapping[str, str]:
    """The request headers the cache key covers: the Anthropic ones the codec kept."""
    return native.headers if isinstance(native, NativeBody) else {}


class ResponseCacheStage:
    def __init__(
        self,
        store: AnswerCacheStore,
        key_prefix: str,
        metrics: GatewayMetrics,
        *,
        shared: bool = False,
        clock: Callable[[], float] = time.time,
        on_answered: Callable[[Flow], None] | None = None,
    ) -> None:
        self.store = store
        self._prefix = key_prefix
        self._metrics = metrics
        # the hit's ledger record, made before its last bytes go out (as respond does)
        self._on_answered = on_answered
        # a shared (Redis) store's failures also count as Redis errors
        self._shared = shared
        self._clock = clock

    async def answer(
        self,
        flow: Flow,
        codec: IngressCodec,
        connection: ClientConnection,
        headers: Mapping[str, str],
    ) -> bool:
        """True when the request was answered from the cache; otherwise a miss that may
        be kept is set up to be recorded (called only when `flow.view.caching`)."""
        settings = cache_settings(flow)
        if settings is None:
            return False
        assert flow.caller is not None and flow.request is not None and flow.native is not None
        route = flow.route or "none"
        may_read, may_write = client_wishes(headers)
        if not may_read and not may_write:
            flow.cache_status = flow.headers[CACHE_HEADER] = "bypass"
            self._metrics.cache_lookup(route, "bypass")
            return False
        tenant = flow.caller.tenant_id
        planned = flow.candidates[0]
        stream = bool(flow.request.stream)
        digest = request_digest(
            flow.api, tenant, planned.model, stream, flow.native, answer_headers(flow.native)
        )
        key = cache_key(self._prefix, tenant, digest)
        flow.cache_status = flow.headers[CACHE_HEADER] = "miss"
        if may_read:
            try:
                data = await self.store.get(key)
            except CacheUnavailable:
                self._unavailable(flow, route, "lookup")
                return False
            entry = decode_answer(data) if data is not None else None
            if data is not None and entry is not None and entry.api == flow.api:
                await self._replay(flow, codec, connection, entry)
                saved = _saved(entry)
                self._metrics.cache_hit(route, tenant, planned.model, len(data), saved)
                return True
            self._metrics.cache_lookup(route, "miss")
        if may_write:
            self._record(flow, key, settings)
        return False

    def _record(self, flow: Flow, key: str, settings: CacheSettings) -> None:
        """Keep the answer once it is complete, before its last bytes are sent, so the
        client's next request finds it (the respond stage calls `on_answer` then)."""
        flow.cache_recording = recording = AnswerRecording(settings.max_entry_bytes)
        after = flow.on_answer

        async def keep_then(answer: bytes) -> None:
            await self._keep(flow, key, settings, recording)
            if after is not None:
                await after(answer)

        flow.on_answer = keep_then

    async def _keep(
        self, flow: Flow, key: str, settings: CacheSettings, recording: AnswerRecording
    ) -> None:
        route = flow.route or "none"
        served = flow.served_by
        if served is None or served.model != flow.candidates[0].model:
            # a fallback's answer is not what the planned model would have said
            self._metrics.cache_write(route, "fallback")
            return
        if recording.too_large:
            self._metrics.cache_write(route, "too_large")
            return
        assert flow.request is not None
        entry = CachedAnswer(
            api=flow.api,
            stream=bool(flow.request.stream),
            native=recording.native,
            model=served.model,
            provider=flow.provider,
            deployment=served.deployment_id,
            usage=flow.usage or Usage(),
            cost_usd=str(flow.cost if flow.cost is not None else _ZERO),
            stored_at=self._clock(),
            body=recording.body,
            payloads=recording.payloads,
            held=recording.held,
        )
        data = encode_answer(entry)
        if len(data) > settings.max_entry_bytes:
            self._metrics.cache_write(route, "too_large")
            return
        try:
            stored = await self.store.put(key, data, settings.ttl_seconds)
        except CacheUnavailable:
            self._unavailable(flow, route, "write")
            return
        except Exception:
            # the answer goes out whatever happens to its copy
            log.exception("caching the answer of request %s failed", flow.request_id)
            self._metrics.cache_write(route, "error")
            return
        if stored:
            self._metrics.cache_write(route, "stored", len(data))
        else:
            self._metrics.cache_write(route, "too_large")

    def _unavailable(self, flow: Flow, route: str, op: str) -> None:
        if op == "lookup":
            self._metrics.cache_lookup(route, "error")
            # the headers have not gone out yet: the client learns it was not looked up
            flow.headers[CACHE_HEADER] = UNAVAILABLE
        else:
            self._metrics.cache_write(route, "error")
        if self._shared:
            self._metrics.redis_error("cache_" + op)

    async def _replay(
        self, flow: Flow, codec: IngressCodec, connection: ClientConnection, entry: CachedAnswer
    ) -> None:
        """The cached answer, encoded for this request: its ids, its usage-chunk wish,
        a cost of 0; then as if served (its ledger record made before the last bytes)."""
        flow.cache_status = flow.headers[CACHE_HEADER] = "hit"
        flow.served_by = flow.candidates[0]
        flow.provider = entry.provider
        flow.cost = _ZERO
        flow.cache_saved_usd = _saved(entry)
        flow.headers["x-gateway-cost-usd"] = "0"
        flow.headers["age"] = str(max(0, int(self._clock() - entry.stored_at)))
        on_answer: Callable[[bytes], Awaitable[None]] | None = flow.on_answer
        ctx = context(flow)
        flow.status = 200
        if not entry.stream:
            body = codec.encode_response(entry.body, entry.native, ctx)
            if on_answer is not None:
                await on_answer(body)
            headers = [
                *JSON_HEADERS,
                (b"content-length", str(len(body)).encode()),
                *gateway_headers(flow),
            ]
            await connection.start(200, headers)
            self._answered(flow)
            await connection.send(body, more=False)
            return
        encoder = codec.stream_encoder(entry.native, ctx)
        frames = encoder.feed(list(entry.payloads))
        tail = encoder.finish(list(entry.held), entry.usage, _ZERO)
        if on_answer is not None:
            await on_answer(b"".join(tail))
        # no first-token time: a hit's would pull the model's TTFT series down
        await connection.start(200, [*SSE_HEADERS, *gateway_headers(flow)])
        self._answered(flow)
        await connection.send(frames + b"".join(tail), more=False)

    def _answered(self, flow: Flow) -> None:
        report_answered(self._on_answered, flow)


def _saved(entry: CachedAnswer) -> Decimal:
    return Decimal(entry.cost_usd)
