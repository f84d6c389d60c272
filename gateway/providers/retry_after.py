"""Reading an upstream's "wait this long" hint from its response headers."""

from __future__ import annotations

import email.utils
from collections.abc import Mapping


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from `retry-after-ms`, or `retry-after` as seconds or an HTTP date.

    `now` (epoch seconds) is needed only for the HTTP-date form; without it that form is
    ignored, which keeps translations free of clock reads.
    """
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    if now is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)
