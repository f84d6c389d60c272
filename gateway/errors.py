"""The gateway's one error tree, and the OpenAI error body each error becomes.

Every failure a client can see is a :class:`GatewayError`. Outside errors (httpx,
redis, msgspec) are mapped to one of these where they enter the gateway, so the
HTTP layer has one place that turns an error into a status and a body.

    GatewayError
    ├── ClientError                       the caller can fix it
    │   ├── InvalidRequest          400   malformed JSON, schema violation (names `param`)
    │   ├── AuthenticationFailed    401   missing or unknown key
    │   ├── PermissionDenied        403   key may not use that model
    │   ├── NotFound                404   unknown model or route
    │   ├── Conflict                409   an admin change collides with what exists
    │   ├── MethodNotAllowed        405   e.g. GET on a POST-only endpoint
    │   ├── BodyTooLarge            413   request body over the configured limit
    │   ├── RateLimited             429   a token bucket or concurrency limit refused it
    │   └── QuotaExceeded           429   a spend budget is exhausted
    └── ServerError                       the gateway or an upstream is at fault
        ├── UpstreamError                 an upstream call failed (names the provider)
        │   ├── UpstreamRejected  4xx     the provider refused the request (its message kept)
        │   ├── UpstreamUnavailable 502   5xx, connection refused or reset, overloaded
        │   │   └── UpstreamUnreachable 502  no connection could be made at all
        │   ├── UpstreamTimeout    504    connect/read/total deadline passed
        │   └── UpstreamMisconfigured 502 the provider refused our credentials
        ├── StoreUnavailable        503   Redis unreachable in fail_closed mode
        ├── Overloaded              503   a GPU pool queue is full or timed out
        └── InternalError           500   a bug; the message never carries a trace

`retryable` says whether the dispatcher may try the same upstream again, and
`retry_after` carries an upstream's or a bucket's hint in seconds.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ErrorBody(msgspec.Struct, omit_defaults=False):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(msgspec.Struct):
    error: ErrorBody


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = None
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.retry_after = retry_after
        self.headers = headers or {}

    def body(self) -> ErrorEnvelope:
        return ErrorEnvelope(ErrorBody(self.message, self.type, self.param, self.code))

    def to_json(self) -> bytes:
        return msgspec.json.encode(self.body())

    def response_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["retry-after"] = str(max(1, int(-(-self.retry_after // 1))))
        return headers


class ClientError(GatewayError):
    status = 400
    type = "invalid_request_error"


class InvalidRequest(ClientError):
    status = 400


class AuthenticationFailed(ClientError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(ClientError):
    status = 403
    type = "permission_error"
    code = "model_not_allowed"


class NotFound(ClientError):
    status = 404
    type = "not_found_error"
    code = "model_not_found"


class Conflict(ClientError):
    """The change collides with what exists (an id taken, a record changed meanwhile)."""

    status = 409
    code = "conflict"


class MethodNotAllowed(ClientError):
    status = 405
    code = "method_not_allowed"


class BodyTooLarge(ClientError):
    status = 413
    code = "request_too_large"


class RateLimited(ClientError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class QuotaExceeded(ClientError):
    status = 429
    type = "insufficient_quota"
    code = "insufficient_quota"


class ServerError(GatewayError):
    status = 500
    type = "server_error"


class UpstreamError(ServerError):
    """An upstream call failed; `provider` names the provider config, never its key."""

    status = 502
    type = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        upstream_status: int | None = None,
        retryable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.provider = provider
        self.upstream_status = upstream_status
        if retryable is not None:
            self.retryable = retryable

    @property
    def cause(self) -> str:
        """A short label for metrics and route headers: the status or the failure kind."""
        if self.upstream_status is not None:
            return str(self.upstream_status)
        return type(self).__name__.removeprefix("Upstream").lower()


class UpstreamRejected(UpstreamError):
    """A 4xx from the provider: passed through with the provider's own message."""

    type = "invalid_request_error"

    def __init__(self, message: str, *, status: int, **kwargs: Any) -> None:
        super().__init__(message, upstream_status=status, **kwargs)
        self.status = status
        if status == 429:
            self.type = "rate_limit_error"
        elif status == 404:
            self.type = "not_found_error"


class UpstreamUnavailable(UpstreamError):
    status = 502
    retryable = True


class UpstreamUnreachable(UpstreamUnavailable):
    """Connection refused or host unreachable: nothing was sent, nothing answered."""


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout"
    retryable = True


class UpstreamMisconfigured(UpstreamError):
    status = 502
    code = "upstream_auth_failed"


class StoreUnavailable(ServerError):
    status = 503
    type = "service_unavailable"
    code = "store_unavailable"


class Overloaded(ServerError):
    status = 503
    type = "service_unavailable"
    code = "overloaded"
    retryable = True


class InternalError(ServerError):
    status = 500
    code = "internal_error"
