"""Respond stage: the dispatcher's answer, through the ingress codec, to the client.

A whole answer is priced and sent with the gateway's headers (cost included). A stream
is pumped one network read at a time, upstream SSE -> translation -> codec -> client,
while a watcher notices the client leaving; the stream's closing frames carry its
usage and cost, priced once the upstream has finished.

A complete answer is handed to `on_answered` (the ledger's record) just before its last
bytes go out: a client that holds a whole answer can count on its record being kept.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

from gateway.errors import UpstreamError, UpstreamUnavailable
from gateway.ingress.base import EncodeContext, IngressCodec, StreamEncoder, VerbatimEncoder
from gateway.pipeline.connection import BodyWriter, ClientConnection, RawHeaders
from gateway.pipeline.dispatch import Dispatcher, OpenStream
from gateway.pipeline.flow import Flow
from gateway.pipeline.pricing import Pricer
from gateway.pipeline.running_task import TaskFinder
from gateway.providers.base import Call, RelayableStream, StreamTranslation
from gateway.providers.sse import SSEEvent, SSEParser
from gateway.redaction import SecretRedactor
from gateway.wire.apis import ANTHROPIC_MESSAGES

log = logging.getLogger("gateway.respond")

JSON_HEADERS: RawHeaders = [(b"content-type", b"application/json")]
SSE_HEADERS: RawHeaders = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def gateway_headers(flow: Flow) -> RawHeaders:
    """What happened, for the client: request id, what served, the route, and what the
    stages collected (rate limits, cost)."""
    out: RawHeaders = [(b"x-request-id", flow.request_id.encode())]
    if flow.api == ANTHROPIC_MESSAGES:
        # where the anthropic SDK reads a request's id (`_request_id`, its error messages)
        out.append((b"request-id", flow.request_id.encode()))
    if flow.served_by is not None:
        out.append((b"x-gateway-model", flow.served_by.model.encode()))
        out.append((b"x-gateway-provider", flow.provider.encode()))
    if flow.route:
        out.append((b"x-gateway-route", flow.route_header().encode("latin-1", "replace")))
    for k, v in flow.headers.items():
        out.append((k.encode(), v.encode()))
    if flow.trace is not None:
        out.append((b"traceparent", flow.trace.response_traceparent.encode()))
    return out


def call_for(flow: Flow) -> Call:
    assert flow.request is not None and flow.raw is not None
    return Call(
        flow.request,
        flow.raw,
        flow.request.model,
        flow.request_id,
        flow.created,
        api=flow.api,
        native=flow.native,
        untranslatable=flow.untranslatable,
        translation_changes=flow.translation_changes,
        builtin_tools=flow.builtin_tools,
    )


def report_answered(on_answered: Callable[[Flow], None] | None, flow: Flow) -> None:
    """The answer is complete and priced; its last bytes go out next (a proxied answer
    and a cache hit alike)."""
    if on_answered is not None:
        try:
            on_answered(flow)
        except Exception:
            # the answer still goes out; settle records it (or logs why it cannot)
            log.exception("recording the answer of request %s failed", flow.request_id)


class Responder:
    def __init__(
        self,
        dispatcher: Dispatcher,
        pricer: Pricer,
        redactor: SecretRedactor,
        on_answered: Callable[[Flow], None] | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._pricer = pricer
        self._redactor = redactor
        self._on_answered = on_answered
        # a stream's watcher cancels the request's task: found without a getpid
        self._tasks = TaskFinder()

    def _answered(self, flow: Flow) -> None:
        report_answered(self._on_answered, flow)

    async def respond(self, flow: Flow, codec: IngressCodec, connection: ClientConnection) -> None:
        call = call_for(flow)
        if call.request.stream:
            await self._stream(flow, call, codec, connection)
            return
        translated = await self._dispatcher.complete(flow, call)
        flow.upstream_seconds = time.perf_counter() - (flow.upstream_started or flow.started)
        flow.usage = translated.usage
        if flow.trace is not None:
            flow.trace.answer.append(translated.body)
        self._pricer.price(flow)
        native = translated.api == codec.api
        body = codec.encode_response(translated.body, native, context(flow))
        if flow.cache_recording is not None:
            flow.cache_recording.whole(translated.body, native)
        if flow.evaluation_recording is not None:
            flow.evaluation_recording.whole(translated.body, native)
        if flow.on_answer is not None:
            await flow.on_answer(body)
        flow.status = 200
        headers = [
            *JSON_HEADERS,
            (b"content-length", str(len(body)).encode()),
            *gateway_headers(flow),
        ]
        await connection.start(200, headers)
        self._answered(flow)
        await connection.send(body, more=False)

    async def _stream(
        self, flow: Flow, call: Call, codec: IngressCodec, connection: ClientConnection
    ) -> None:
        opened = await self._dispatcher.open_stream(flow, call)
        native = opened.api == codec.api
        encoder = codec.stream_encoder(native, context(flow))
        if flow.cache_recording is not None:
            flow.cache_recording.native = native
        if flow.evaluation_recording is not None:
            flow.evaluation_recording.native = native
        flow.status = 200
        await connection.start(200, [*SSE_HEADERS, *gateway_headers(flow)])
        # the pump runs in the request's own task; a watcher cancels it if the client
        # leaves mid-stream (one task per stream, not two and an asyncio.wait)
        task = self._tasks.current()
        pumping = True
        client_left = False

        def watched(watcher: asyncio.Future[None]) -> None:
            nonlocal client_left
            if pumping and not watcher.cancelled() and watcher.exception() is None:
                client_left = True
                task.cancel()

        watcher = task.get_loop().create_task(connection.wait_disconnect())
        watcher.add_done_callback(watched)
        try:
            await self._pump(flow, opened, encoder, connection, native)
        except asyncio.CancelledError:
            if not client_left:
                raise
            task.uncancel()
            flow.client_disconnected = True
            flow.status = 499
        finally:
            pumping = False
            watcher.remove_done_callback(watched)
            watcher.cancel()
            # an abandoned stream is billed for what was generated
            _take_usage(flow, opened.translation)
            flow.upstream_seconds = time.perf_counter() - (flow.upstream_started or flow.started)

    async def _pump(
        self,
        flow: Flow,
        opened: OpenStream,
        encoder: StreamEncoder,
        connection: ClientConnection,
        native: bool,
    ) -> None:
        """Upstream bytes -> SSE events -> payloads -> the client's frames, one read at a
        time.

        A same-API stream whose read is whole `data:` events with nothing the gateway
        must read (no usage, error or end) is relayed as it came: one client write per
        upstream read, with no event taken apart or framed again. What nothing but the
        payloads can feed (a trace, a cache or evaluation recording) takes them apart."""
        parser = SSEParser()
        translation = opened.translation
        recording = flow.cache_recording
        evaluating = flow.evaluation_recording
        trace = flow.trace
        relay, relayed = _relay(opened, encoder, flow) if native else (None, _ignore)
        ended_by: BaseException | None = None
        chunks = opened.response.iter_bytes()
        if relay is not None:
            writer = connection.body_writer()
            offered = getattr(opened.response, "iter_offered", None)
            if writer is not None and offered is not None:
                # the relayable reads go to the client from the upstream's read callback
                take, take_chunk = _relay_at_once(
                    parser, cast(RelayableStream, translation), relayed, writer, flow
                )
                # (the type quoted: not built at run time, for every stream)
                chunks = cast(
                    "Callable[[Callable[[bytes], bool], Callable[[bytes, int, int], bool]], "
                    "AsyncIterator[bytes]]",
                    offered,
                )(take, take_chunk)
        try:
            try:
                async for chunk in chunks:
                    if relay is not None:
                        events = parser.whole_data_events(chunk)
                        if events and relay(chunk, events):
                            flow.streamed_chunks += events
                            relayed(chunk)
                            if flow.first_token_at is None:
                                flow.first_token_at = time.perf_counter()
                            await connection.send(chunk, more=True)
                            continue
                    payloads, failure = _translate(translation, parser.feed(chunk))
                    if payloads:
                        if trace is not None:
                            trace.keep_answer_piece(payloads)
                        flow.streamed_chunks += len(payloads)
                        if recording is not None:
                            recording.feed(payloads)
                        if evaluating is not None:
                            evaluating.feed(payloads)
                        try:
                            body = encoder.feed(payloads)
                        except Exception:
                            raise _unwritable() from None
                        if body:
                            if flow.first_token_at is None:
                                flow.first_token_at = time.perf_counter()
                            await connection.send(body, more=True)
                    if failure is not None:
                        raise failure
                payloads, failure = _translate(translation, parser.flush())
                if failure is not None:
                    raise failure
                try:
                    tail = [encoder.feed(payloads)] if payloads else []
                except Exception:
                    raise _unwritable() from None
                _take_usage(flow, translation)
                self._pricer.price(flow)
                held = translation.finish()
                if recording is not None:
                    recording.feed(payloads)
                    recording.finish(held)
                if evaluating is not None:
                    evaluating.feed(payloads)
                try:
                    tail.extend(encoder.finish(held, flow.usage, flow.cost))
                except Exception:
                    raise _unwritable() from None
                if flow.on_answer is not None:
                    await flow.on_answer(b"".join(tail))
                self._answered(flow)
            except UpstreamError as error:
                ended_by = error
                if not error.provider:
                    error.provider = opened.target.provider
                flow.status = error.status
                flow.error_code = error.code
                self._redactor.error(error)
                flow.error_message = error.message
                log.warning(
                    "stream from %s failed mid-way: %s", opened.target.provider, error.message
                )
                tail = encoder.error(error)
            await connection.send(b"".join(tail), more=False)
        finally:
            await opened.response.close()
            opened.finish(ended_by)


def _relay(
    opened: OpenStream, encoder: StreamEncoder, flow: Flow
) -> tuple[Callable[[bytes, int], bool] | None, Callable[[bytes], None]]:
    """The translation's and the encoder's halves of relaying reads as they came, for a
    stream whose client speaks the upstream's API, when both sides frame events alike
    and nothing needs the payloads one by one."""
    translation = opened.translation
    if (
        flow.trace is None
        and flow.cache_recording is None
        and flow.evaluation_recording is None
        and _relayable(type(translation), type(encoder))
        and cast(VerbatimEncoder, encoder).verbatim
    ):
        return cast(RelayableStream, translation).relay, cast(VerbatimEncoder, encoder).relayed
    return None, _ignore


@functools.cache
def _relayable(translation: type, encoder: type) -> bool:
    """Once per pair of classes, not per stream: isinstance of a runtime-checkable
    Protocol walks its members on every call (~14 us for one method, ~50 us for two),
    and a Protocol with a data member (both of these) has no issubclass."""
    return (
        callable(getattr(translation, "relay", None))
        and callable(getattr(translation, "relay_one", None))
        and hasattr(translation, "content_chunks")
        and callable(getattr(encoder, "relayed", None))
        and hasattr(encoder, "verbatim")
    )


def _ignore(frames: bytes) -> None:
    pass


def _relay_at_once(
    parser: SSEParser,
    translation: RelayableStream,
    relayed: Callable[[bytes], None],
    writer: BodyWriter,
    flow: Flow,
) -> tuple[Callable[[bytes], bool], Callable[[bytes, int, int], bool]]:
    """What the upstream's read callback offers a read to (`iter_offered`): a read the
    pump would relay as it came (whole `data:` events, nothing the gateway must read)
    is written to the client there and then, counted as the pump counts it, and the
    request's task is not woken for it. Anything else, or a client that is gone or
    behind in reading, is left to the pump (it sends, which waits for the client).

    The second is offered a read that was one whole upstream chunk (`take_chunk(read,
    start, stop)`, the event at `read[start:stop]`): its event relayed, `read` itself,
    already the client's chunked frame of it, is written as it came."""
    whole_data_events = parser.whole_data_events
    relay = translation.relay
    relay_one = translation.relay_one
    writable = writer.writable
    write = writer.write
    write_framed = writer.write_framed

    def take(chunk: bytes) -> bool:
        events = whole_data_events(chunk)
        if not events or not writable() or not relay(chunk, events):
            return False
        flow.streamed_chunks += events
        relayed(chunk)
        if flow.first_token_at is None:
            flow.first_token_at = time.perf_counter()
        write(chunk)
        return True

    def take_chunk(read: bytes, start: int, stop: int) -> bool:
        if parser.pending:
            return False
        content = relay_one(read, start, stop)
        if content < 0 or not write_framed(read):
            return False
        translation.content_chunks += content
        flow.streamed_chunks += 1
        relayed(read[start:stop])
        if flow.first_token_at is None:
            flow.first_token_at = time.perf_counter()
        return True

    return take, take_chunk


def context(flow: Flow) -> EncodeContext:
    """What the codec encodes the answer with, once dispatch has chosen what serves it."""
    assert flow.request is not None
    served = flow.served_by
    return EncodeContext(
        request_id=flow.request_id,
        created=flow.created,
        model=served.deployment.upstream_model if served is not None else flow.request.model,
        wants_usage=flow.request.wants_usage_chunk,
        native=flow.native,
    )


def _take_usage(flow: Flow, translation: StreamTranslation) -> None:
    flow.usage = translation.usage or flow.usage
    flow.content_chunks = translation.content_chunks
    flow.unreported_text = translation.unreported_text


def _unwritable() -> UpstreamUnavailable:
    """What ends a stream whose chunk the client's API cannot be written from (the
    encoder failed on it): an error event in that API, never a cut connection. Called
    while the encoder's exception is handled, so the log has its traceback."""
    log.exception("a stream chunk could not be written in the client's API")
    return UpstreamUnavailable(
        "the upstream sent a stream chunk the gateway could not translate",
        provider="",
        retryable=False,
    )


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
        except Exception:
            # a translation that cannot read an event: the stream ends with an error
            # event, never a cut connection
            log.exception("a stream event could not be translated")
            return payloads, UpstreamUnavailable(
                "the upstream sent a stream event the gateway could not read",
                provider="",
                retryable=False,
            )
    return payloads, None
