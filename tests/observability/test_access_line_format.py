"""The JSON access line, byte for byte: the fast path (`LogPipeline.write_request`, its
constant head encoded once per logger and level, the timestamp text cached per
millisecond) writes what `JsonFormatter` writes for the same entry, field names, order,
omitted fields and number formatting included."""

from __future__ import annotations

import io
import logging
import re
import time
from decimal import Decimal

from gateway.observability.logs import (
    AccessLog,
    JsonFormatter,
    LogPipeline,
    RequestLogEntry,
    _Clock,
)

ENTRIES = [
    RequestLogEntry(request_id="req_1", status=200, latency_ms=1.0),
    RequestLogEntry(
        request_id="req_34423c89ab94e0ae00000001",
        status=200,
        latency_ms=20.346,
        tenant="bench",
        key_id="bench",
        route="instant",
        model="instant",
        provider="instant",
        deployment="instant/bench-model",
        input_tokens=500,
        output_tokens=16,
        cost_usd=Decimal("0.00014672"),
        upstream_ms=19.297,
    ),
    RequestLogEntry(
        request_id="req_2",
        status=200,
        latency_ms=0.1,
        tenant="acmé",
        key_id='k"ey',
        route="auto",
        model="gpt-4.1",
        provider="openai",
        deployment="openai/gpt-4.1",
        stream=True,
        input_tokens=262_144,
        output_tokens=1,
        cached_tokens=60,
        reasoning_tokens=8,
        tokens_estimated=True,
        cost_usd=Decimal("1E-7"),
        ttft_ms=1e-7,
        upstream_ms=123456789.125,
        retries=2,
        fallback=True,
        fallback_from="claude:502,gemini:circuit_open",
        fallback_reason="upstream_unavailable",
        attempts="claude:502,claude:502",
        skipped="gemini:cooldown",
        panic=True,
    ),
    RequestLogEntry(
        request_id="req_3",
        status=502,
        latency_ms=3000.0,
        cost_usd=Decimal(0),
        error_type="upstream_error",
        error_code="upstream_unavailable",
    ),
    RequestLogEntry(request_id="req_4", status=429, latency_ms=0.0, cost_usd=Decimal("12.50")),
    # a client-chosen id shaped like a key is masked
    RequestLogEntry(request_id="sk-" + "a1" * 20, status=200, latency_ms=2.5),
    RequestLogEntry(request_id="Bearer abc.def", status=401, latency_ms=0.25),
]

TS = re.compile(r'^\{"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",')


def without_ts(line: str) -> str:
    assert TS.match(line), line
    return TS.sub("{", line)


def fast_lines(logger_name: str) -> list[str]:
    stream = io.StringIO()
    pipeline = LogPipeline("json", stream=stream)
    logger = logging.getLogger(logger_name)
    logger.propagate = False
    pipeline.install(logger)
    pipeline.start()
    access = AccessLog(logger, pipeline=pipeline)
    for entry in ENTRIES:
        access.request(entry)
    pipeline.stop()
    return stream.getvalue().splitlines()


def formatter_lines(logger_name: str) -> list[str]:
    formatter = JsonFormatter()
    lines = []
    for entry in ENTRIES:
        level = logging.WARNING if entry.status >= 500 else logging.INFO
        record = logging.LogRecord(logger_name, level, "", 0, "request", None, None)
        record.request_entry = entry
        lines.append(formatter.format(record))
    return lines


def test_fast_access_lines_are_the_formatters_lines_byte_for_byte() -> None:
    for name in ("gateway.access", 'odd "logger" é'):
        fast = fast_lines(name)
        assert len(fast) == len(ENTRIES)
        assert [without_ts(line) for line in fast] == [
            without_ts(line) for line in formatter_lines(name)
        ]
    assert "a1a1" not in "".join(fast) and "abc.def" not in "".join(fast)


def test_the_access_line_format_is_unchanged() -> None:
    assert without_ts(fast_lines("gateway.access")[1]) == (
        '{"level":"info","logger":"gateway.access","msg":"request",'
        '"request_id":"req_34423c89ab94e0ae00000001","status":200,"latency_ms":20.346,'
        '"tenant":"bench","key_id":"bench","route":"instant","model":"instant",'
        '"provider":"instant","deployment":"instant/bench-model","input_tokens":500,'
        '"output_tokens":16,"cost_usd":0.00014672,"upstream_ms":19.297}'
    )
    assert without_ts(fast_lines("gateway.access")[3]).startswith(
        '{"level":"warning","logger":"gateway.access","msg":"request","request_id":"req_3",'
        '"status":502,"latency_ms":3000.0,"cost_usd":0,"error_type":"upstream_error",'
    )


def test_the_cached_clock_says_what_formatting_each_time_says() -> None:
    clock = _Clock()
    start = time.time()
    times = [start + i * 0.0003 for i in range(10_000)]  # several per millisecond
    times += [start + 1.9999999, start + 2.0, start + 2.0000001, start, start + 86_400.5]
    times += [1_700_000_000.0, 1_700_000_000.9995, 1_700_000_001.0004, 0.0]
    for created in times:
        expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(created)))
        expected += f".{int(created % 1 * 1000):03d}Z"
        assert clock.iso(created) == expected, created
