"""Gemini error responses -> the gateway's error tree. Bodies follow Google's
`{"error": {"code", "message", "status", "details"}}` shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import (
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.providers.gemini import GeminiTranslation
from tests.fakes.gemini_server import error_body
from tests.providers.support import GEMINI_KEY, gemini_target

translation = GeminiTranslation()


def mapped(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> UpstreamError:
    body = error_body(code, message, details)
    body["error"]["code"] = status
    return translation.map_error(status, json.dumps(body).encode(), headers or {}, gemini_target())


@pytest.mark.parametrize(
    ("status", "code", "kind", "retryable", "client_status"),
    [
        (429, "RESOURCE_EXHAUSTED", UpstreamRejected, True, 429),
        (503, "UNAVAILABLE", UpstreamUnavailable, True, 502),
        (500, "INTERNAL", UpstreamUnavailable, True, 502),
        (504, "DEADLINE_EXCEEDED", UpstreamTimeout, True, 504),
        (400, "INVALID_ARGUMENT", UpstreamRejected, False, 400),
        (400, "FAILED_PRECONDITION", UpstreamRejected, False, 400),
        (404, "NOT_FOUND", UpstreamRejected, False, 404),
        (403, "PERMISSION_DENIED", UpstreamMisconfigured, False, 502),
        (401, "UNAUTHENTICATED", UpstreamMisconfigured, False, 502),
    ],
)
def test_error_classes_and_retryability(
    status: int, code: str, kind: type[UpstreamError], retryable: bool, client_status: int
) -> None:
    error = mapped(status, code, "details here")
    assert type(error) is kind
    assert error.retryable is retryable
    assert error.status == client_status
    assert error.provider == "gemini-prod"


def test_invalid_argument_keeps_geminis_message() -> None:
    error = mapped(
        400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified"
    )
    assert error.message == "* GenerateContentRequest.contents: contents is not specified"


def test_an_invalid_key_400_is_a_misconfiguration_naming_the_config() -> None:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
    error = mapped(400, "INVALID_ARGUMENT", f"API key not valid: {GEMINI_KEY}", details)
    assert isinstance(error, UpstreamMisconfigured)
    assert "providers.gemini-prod.api_key" in error.message
    assert "GEMINI_API_KEY" in error.message
    assert GEMINI_KEY not in error.to_json().decode()


def test_retry_delay_comes_from_the_header_or_the_retry_info_detail() -> None:
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}]
    assert mapped(429, "RESOURCE_EXHAUSTED", "quota", retry_info).retry_after == 12.0
    assert (
        mapped(429, "RESOURCE_EXHAUSTED", "quota", retry_info, {"retry-after": "2"}).retry_after
        == 2.0
    )
    assert mapped(429, "RESOURCE_EXHAUSTED", "quota").retry_after is None


def test_a_body_that_is_not_json_still_maps_by_status() -> None:
    error = translation.map_error(503, b"upstream connect error", {}, gemini_target())
    assert isinstance(error, UpstreamUnavailable)
    assert error.retryable
