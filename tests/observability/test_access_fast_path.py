"""The access log's fast path writes exactly what the logging path writes."""

from __future__ import annotations

import io
import json
import logging
from decimal import Decimal

import pytest

from gateway.observability.logs import AccessLog, LogFormat, LogPipeline, RequestLogEntry

ENTRY = RequestLogEntry(
    request_id="req-1",
    status=200,
    latency_ms=12.5,
    tenant="acme",
    model="m",
    input_tokens=10,
    output_tokens=5,
    cost_usd=Decimal("0.000016"),
)


def lines_written(log_format: LogFormat, fast: bool) -> list[str]:
    stream = io.StringIO()
    pipeline = LogPipeline(log_format, stream=stream)
    logger = logging.getLogger(f"test.access.{log_format}.{fast}")
    logger.propagate = False
    pipeline.install(logger)
    pipeline.start()
    AccessLog(logger, pipeline=pipeline if fast else None).request(ENTRY)
    AccessLog(logger, pipeline=pipeline if fast else None).request(
        RequestLogEntry(request_id="req-2", status=502, latency_ms=1.0)
    )
    pipeline.stop()
    return stream.getvalue().splitlines()


def test_fast_path_json_lines_match_the_logging_path() -> None:
    slow = [json.loads(line) for line in lines_written("json", fast=False)]
    fast = [json.loads(line) for line in lines_written("json", fast=True)]
    for line in (*slow, *fast):
        line.pop("ts")
    assert {line.pop("logger") for line in fast} == {"test.access.json.True"}
    assert {line.pop("logger") for line in slow} == {"test.access.json.False"}
    assert fast == slow
    assert fast[0]["input_tokens"] == 10 and fast[1]["level"] == "warning"


@pytest.mark.parametrize("fast", [False, True])
def test_text_lines_describe_the_request(fast: bool) -> None:
    lines = lines_written("text", fast)
    assert "200 - -> m@-" in lines[0] and "tokens=10/5" in lines[0]
    assert "WARNING" in lines[1]


def test_fast_path_redacts_a_key_shaped_request_id() -> None:
    stream = io.StringIO()
    pipeline = LogPipeline("json", stream=stream)
    logger = logging.getLogger("test.access.redaction")
    logger.propagate = False
    pipeline.install(logger)
    pipeline.start()
    secret = "sk-" + "a1" * 20
    AccessLog(logger, pipeline=pipeline).request(
        RequestLogEntry(request_id=secret, status=200, latency_ms=1.0)
    )
    pipeline.stop()
    assert secret not in stream.getvalue()
    assert json.loads(stream.getvalue())["status"] == 200
