"""Anthropic error responses -> the gateway's error tree: which are retryable, which keep
Anthropic's message, and that credential failures name the config, never the key.
Bodies are the SDK's `ErrorResponse` dumped to JSON."""

from __future__ import annotations

import json

import pytest

from gateway.errors import (
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.providers.anthropic import AnthropicTranslation
from tests.fakes.anthropic_server import error_body
from tests.providers.support import ANTHROPIC_KEY, anthropic_target

translation = AnthropicTranslation()


def mapped(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> UpstreamError:
    body = json.dumps(error_body(error_type, message)).encode()
    return translation.map_error(status, body, headers or {}, anthropic_target())


@pytest.mark.parametrize(
    ("status", "error_type", "kind", "retryable", "client_status"),
    [
        (529, "overloaded_error", UpstreamUnavailable, True, 502),
        (500, "api_error", UpstreamUnavailable, True, 502),
        (503, "api_error", UpstreamUnavailable, True, 502),
        (429, "rate_limit_error", UpstreamRejected, True, 429),
        (400, "invalid_request_error", UpstreamRejected, False, 400),
        (404, "not_found_error", UpstreamRejected, False, 404),
        (413, "invalid_request_error", UpstreamRejected, False, 413),
        (504, "timeout_error", UpstreamTimeout, True, 504),
        (401, "authentication_error", UpstreamMisconfigured, False, 502),
        (403, "permission_error", UpstreamMisconfigured, False, 502),
    ],
)
def test_error_classes_and_retryability(
    status: int, error_type: str, kind: type[UpstreamError], retryable: bool, client_status: int
) -> None:
    error = mapped(status, error_type, "something happened")
    assert type(error) is kind
    assert error.retryable is retryable
    assert error.status == client_status
    assert error.provider == "claude-prod"


def test_invalid_request_keeps_anthropics_message() -> None:
    error = mapped(400, "invalid_request_error", "messages.0.content: Field required")
    assert error.message == "messages.0.content: Field required"
    assert error.body().error.type == "invalid_request_error"


def test_auth_failure_names_the_provider_config_and_never_the_key() -> None:
    error = mapped(401, "authentication_error", f"invalid x-api-key {ANTHROPIC_KEY}")
    assert "providers.claude-prod.api_key" in error.message
    assert "ANTHROPIC_API_KEY" in error.message
    assert ANTHROPIC_KEY not in error.message
    assert ANTHROPIC_KEY not in error.to_json().decode()


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)],
)
def test_rate_limits_carry_the_retry_after_hint(
    headers: dict[str, str], seconds: float | None
) -> None:
    error = mapped(429, "rate_limit_error", "slow down", headers)
    assert error.retry_after == seconds


def test_overloaded_carries_retry_after_too() -> None:
    assert mapped(529, "overloaded_error", "Overloaded", {"retry-after": "3"}).retry_after == 3.0


def test_a_body_that_is_not_json_still_maps_by_status() -> None:
    error = translation.map_error(529, b"<html>busy</html>", {}, anthropic_target())
    assert isinstance(error, UpstreamUnavailable)
    assert "busy" in error.message
