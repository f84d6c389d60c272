"""A local OTLP/HTTP trace collector for benchmarks: accepts `POST /v1/traces`, decodes
each ExportTraceServiceRequest (as a collector would, so the exporter's requests are
real ones answered by a real decoder) and counts the spans.

    python bench/otlp_sink.py --port N

`GET /count` answers {"spans": N, "requests": M} so far; any other GET is its health check.
"""

from __future__ import annotations

import argparse
import gzip
import json
from typing import Any

import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ACCEPTED = ExportTraceServiceResponse().SerializeToString()


class Sink:
    def __init__(self) -> None:
        self.spans = 0
        self.requests = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "GET":
            answer = json.dumps({"spans": self.spans, "requests": self.requests}).encode()
            await _send(send, 200, answer, b"application/json")
            return
        headers = dict(scope["headers"])
        if headers.get(b"content-encoding") == b"gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        self.requests += 1
        self.spans += sum(
            len(scope_spans.spans)
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
        )
        await _send(send, 200, ACCEPTED, b"application/x-protobuf")


async def _send(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(Sink(), host="127.0.0.1", port=args.port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
