"""Reading the client's `Authorization` header: a leaf, so the codecs that find a key
and the admin room that checks one share it without importing each other."""

from __future__ import annotations


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; "" when malformed."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return ""
    return token
