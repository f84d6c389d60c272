"""A real OTLP/HTTP trace receiver for tests: the collector's `POST /v1/traces`, decoding
each ExportTraceServiceRequest protobuf (gzip or plain) with opentelemetry-proto, as an
OpenTelemetry Collector's otlphttp receiver does, and keeping every span it received.

    with OtlpReceiver() as receiver:
        receiver.endpoint          # http://127.0.0.1:PORT (OTEL_EXPORTER_OTLP_ENDPOINT)
        receiver.wait_for(lambda spans: len(spans) >= 7)
        receiver.refuse = 503      # answer exports with an error, as a collector under load
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.fakes.server_thread import ServerThread

KINDS = {
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_INTERNAL: "internal",
}


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    resource: dict[str, Any]
    headers: dict[str, str]

    @property
    def failed(self) -> bool:
        return self.status_code == 2  # STATUS_CODE_ERROR


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        # a status to answer exports with instead of accepting them (None: accept)
        self.refuse: int | None = None
        self._lock = threading.Lock()
        self._server = ServerThread(self.app)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.port}"

    def __enter__(self) -> OtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 30
    ) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.snapshot()
            if done(spans):
                return spans
            time.sleep(0.05)
        raise AssertionError(f"the receiver did not get the spans in time: {self.snapshot()}")

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["path"] != "/v1/traces" or scope["method"] != "POST":
            await _answer(send, 404, b"")
            return
        with self._lock:
            self.requests += 1
            refuse = self.refuse
        if refuse is not None:
            await _answer(send, refuse, b"")
            return
        if headers.get("content-encoding") == "gzip":
            body = await asyncio.to_thread(gzip.decompress, body)
        request = ExportTraceServiceRequest.FromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            status_code=span.status.code,
                            resource=resource,
                            headers=headers,
                        )
                    )
        with self._lock:
            self.spans.extend(received)
        await _answer(send, 200, ExportTraceServiceResponse().SerializeToString())


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/x-protobuf")],
        }
    )
    await send({"type": "http.response.body", "body": body})
