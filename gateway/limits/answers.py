"""What a client is told about limits: OpenAI's `x-ratelimit-*` headers, and the error
a refusal becomes (429 `rate_limit_exceeded`, or `insufficient_quota` for budgets)."""

from __future__ import annotations

import math

from gateway.errors import QuotaExceeded, RateLimited
from gateway.limits.spec import Admission, Refusal, micros_to_usd

# each bucket kind's (limit, remaining, reset) header names, made once: every admitted
# request of a limited key is told both kinds
_REQUESTS_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
)
_TOKENS_HEADERS = (
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)


def rate_limit_headers(admission: Admission) -> dict[str, str]:
    """`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the tightest buckets."""
    headers: dict[str, str] = {}
    for names, state in (
        (_REQUESTS_HEADERS, admission.requests),
        (_TOKENS_HEADERS, admission.tokens),
    ):
        if state is not None:
            limit, remaining, reset = names
            headers[limit] = str(state.limit)
            headers[remaining] = str(max(0, math.floor(state.remaining)))
            headers[reset] = format_duration(state.reset_seconds)
    return headers


def format_duration(seconds: float) -> str:
    """OpenAI's duration style: `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`."""
    # (not max(0.0, seconds): a builtin call per header; NaN and negatives are 0 either way)
    millis = math.ceil(seconds * 1000) if seconds > 0 else 0
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def refusal_error(
    admission: Admission, fitting_max_tokens: int | None = None
) -> RateLimited | QuotaExceeded:
    """The error to answer a refused admission with (it carries Retry-After and headers).
    For a budget, `fitting_max_tokens` is the largest `max_tokens` whose worst case the
    budget still holds (0: not even the prompt fits), when the caller could work it out."""
    refusal = admission.refusal
    if refusal is None:
        raise ValueError("the admission was not refused")
    headers = rate_limit_headers(admission)
    if refusal.never_fits:
        # the openai SDK honours this and does not retry what can never succeed
        headers["x-should-retry"] = "false"
    if refusal.kind == "budget":
        if refusal.retry_after_seconds is None:
            headers["x-should-retry"] = "false"
        return QuotaExceeded(_budget_message(refusal, fitting_max_tokens), headers=headers)
    return RateLimited(
        _rate_message(refusal), retry_after=refusal.retry_after_seconds, headers=headers
    )


def _rate_message(refusal: Refusal) -> str:
    limit, requested = _count(refusal.limit), _count(refusal.requested)
    if refusal.kind == "concurrency":
        return (
            f"Too many concurrent requests on {refusal.scope}: at most {limit} may be in "
            "flight at once. Please try again shortly."
        )
    unit = "requests" if refusal.kind == "requests" else "tokens"
    if refusal.never_fits:
        return (
            f"This request needs {requested} {unit}, more than the {unit} per minute limit "
            f"on {refusal.scope} can ever hold ({limit}); it can never fit. Shorten the "
            "prompt or lower max_tokens."
        )
    wait = format_duration(refusal.retry_after_seconds or 0)
    return (
        f"Rate limit reached for {unit} per minute on {refusal.scope}: limit {limit}, "
        f"requested {requested}. Please try again in {wait}."
    )


def _budget_message(refusal: Refusal, fitting_max_tokens: int | None) -> str:
    limit = micros_to_usd(int(refusal.limit))
    worst = micros_to_usd(int(refusal.requested))
    # the reservation is the request's worst case: its prompt plus every output token it
    # may ask for (max_tokens, else the model's output limit), so a smaller max_tokens fits
    if refusal.never_fits:
        if fitting_max_tokens is None:
            advice = "Lower max_tokens."
        elif fitting_max_tokens > 0:
            advice = f"Set max_tokens to at most {fitting_max_tokens} to fit."
        else:
            advice = "The prompt alone costs more than that: shorten it."
        return (
            f"This request may cost up to ${worst}, more than the whole budget on "
            f"{refusal.scope} (${limit}); it can never fit. {advice}"
        )
    wait = format_duration(refusal.retry_after_seconds or 0)
    advice = (
        f" Set max_tokens to at most {fitting_max_tokens} to fit in what is left."
        if fitting_max_tokens
        else ""
    )
    return (
        f"Budget exhausted on {refusal.scope}: limit ${limit}, and this request may cost up "
        f"to ${worst}.{advice} The budget frees up in {wait}."
    )


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
