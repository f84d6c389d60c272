"""Upstream wait hints: retry-after-ms, Retry-After seconds and HTTP dates."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.retry_after import retry_after_seconds


def test_retry_after_seconds() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5


def test_retry_after_ms_wins_over_seconds() -> None:
    headers = {"retry-after-ms": "250", "retry-after": "3"}
    assert retry_after_seconds(headers) == 0.25


def test_retry_after_http_date_counts_from_now() -> None:
    now = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 11, 30, 8, 0, 7, tzinfo=UTC), usegmt=True)
    assert retry_after_seconds({"Retry-After": later}, now=now.timestamp()) == 7.0


def test_retry_after_date_in_the_past_means_now() -> None:
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert retry_after_seconds({"Retry-After": past}, now=1.7e9) == 0.0
    # without a clock reading the date form is no hint: translations read no clocks
    assert retry_after_seconds({"Retry-After": past}) is None


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", ""])
def test_unreadable_retry_after_is_no_hint(value: str) -> None:
    assert retry_after_seconds({"Retry-After": value}) is None


def test_no_header_is_no_hint() -> None:
    assert retry_after_seconds({"content-type": "application/json"}) is None


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5))
def test_retry_after_seconds_never_raises_and_never_goes_negative(
    headers: dict[str, str],
) -> None:
    result = retry_after_seconds(headers, now=1.7e9)
    assert result is None or result >= 0.0
