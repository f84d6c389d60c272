"""Reading an upstream's "wait this long" hint from its response headers."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from an upstream's `retry-after-ms` or `Retry-After` header.

    `retry-after-ms` (OpenAI, Azure) wins when present because it is more precise.
    `Retry-After` may be delta-seconds or an HTTP-date; the date form needs `now` (epoch
    seconds), which keeps translations free of clock reads: without it that form is no
    hint. A date in the past means 0. Unparseable, negative or non-finite values count
    as no hint. Header names match case-insensitively.
    """
    millis = _number(_header(headers, "retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = _header(headers, "retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    if now is None:
        return None
    return _seconds_until_http_date(value, now)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    direct = headers.get(name)
    if direct is not None:
        return direct
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return number


def _seconds_until_http_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)
