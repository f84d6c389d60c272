"""The text access line names each fallback with its cause, as the flow recorded them
(`model:cause`), never `(None)` (issue 18)."""

from __future__ import annotations

import logging

from gateway.observability.logs import RequestLogEntry, TextFormatter


def line(entry: RequestLogEntry) -> str:
    record = logging.LogRecord("gateway.access", logging.INFO, __file__, 1, "", None, None)
    record.request_entry = entry
    return TextFormatter().format(record)


def test_each_fallback_is_named_with_its_cause() -> None:
    entry = RequestLogEntry(
        request_id="r1",
        status=200,
        latency_ms=12.0,
        route="auto",
        model="claude",
        provider="anthropic",
        fallback=True,
        fallback_from="gpt-4.1:401,gemini:circuit_open",
    )
    text = line(entry)
    assert "fallback from gpt-4.1 (401), gemini (circuit_open)" in text
    assert "None" not in text


def test_a_reason_given_apart_still_reads() -> None:
    entry = RequestLogEntry(
        request_id="r2",
        status=200,
        latency_ms=12.0,
        fallback=True,
        fallback_from="claude-sonnet-4.5",
        fallback_reason="upstream_timeout",
    )
    assert "fallback from claude-sonnet-4.5 (upstream_timeout)" in line(entry)
