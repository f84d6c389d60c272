"""The one decoder every ingress reads its body with: bytes -> strict UTF-8 -> JSON
nested no deeper than a limit -> a JSON object. Every failure is a 400
:class:`~gateway.errors.InvalidRequest` that says what was wrong and where.

The happy path costs one `msgspec` decode: the UTF-8 check, the surrogate diagnosis and
the depth walk only run when msgspec refused the body or when the body holds more
brackets than the depth limit (so a nesting that deep is possible at all; they are
found one by one, stopping past the limit).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.errors import InvalidRequest

DEFAULT_MAX_DEPTH = 128

# an escaped UTF-16 surrogate: a high one not followed by a low one, or a low one alone
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_BYTE_AT = re.compile(r"\(byte (\d+)\)")


def decode_json_object(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """The JSON object in `body`; raises InvalidRequest (code `invalid_json`) otherwise."""
    if not body:
        raise _invalid("The request body is empty; expected a JSON object.")
    try:
        value = msgspec.json.decode(body)
    except UnicodeDecodeError:
        raise _invalid(_utf8_problem(body)) from None
    except RecursionError:
        raise _too_deep(max_depth) from None
    except msgspec.DecodeError as exc:
        raise _invalid(_json_problem(body, exc)) from None
    if not isinstance(value, dict):
        raise _invalid(f"The request body must be a JSON object, not {_kind(value)}.")
    if more_brackets_than(body, max_depth) and deeper_than(value, max_depth):
        raise _too_deep(max_depth)
    return value


def more_brackets_than(body: bytes, limit: int) -> bool:
    """Whether `body` holds more than `limit` opening brackets (`[` and `{` together), so
    a nesting deeper than `limit` is possible at all. Found one at a time (`find` is a
    memchr), stopping past `limit`: a request body holds a few dozen, and counting them
    with `bytes.count` walks every byte twice, ~10 instructions a byte."""
    found = 0
    for bracket in (b"[", b"{"):
        at = body.find(bracket)
        while at >= 0:
            found += 1
            if found > limit:
                return True
            at = body.find(bracket, at + 1)
    return False


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_json")


def _too_deep(max_depth: int) -> InvalidRequest:
    return _invalid(
        f"The JSON body is nested more than {max_depth} levels deep "
        "(the gateway's server.max_json_depth); flatten it."
    )


def _utf8_problem(body: bytes) -> str:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"The request body is not valid UTF-8: byte 0x{body[exc.start]:02x} at byte offset "
            f"{exc.start} ({exc.reason}). Send JSON encoded as UTF-8."
        )
    # msgspec and Python disagree on what is UTF-8: say what msgspec said
    return "The request body is not valid UTF-8. Send JSON encoded as UTF-8."


def _json_problem(body: bytes, exc: msgspec.DecodeError) -> str:
    detail = str(exc)
    # msgspec words these as "surrogate pair" problems, or as truncation when the string
    # ends right after the escape
    suspect = "surrogate" in detail or detail == "Input data was truncated"
    lone = _LONE_SURROGATE.search(body) if suspect else None
    if lone is not None:
        escape = lone.group().decode("ascii")
        return (
            f"The JSON body holds an unpaired UTF-16 surrogate escape ({escape}) at byte offset "
            f"{lone.start()}; a string must be valid Unicode (a high surrogate \\ud800-\\udbff "
            "must be followed by a low one \\udc00-\\udfff)."
        )
    if detail == "Input data was truncated":
        detail = f"the body ends before the JSON value does (after {len(body)} bytes)"
    else:
        detail = _BYTE_AT.sub(lambda m: f"at byte offset {m.group(1)}", detail)
    return f"We could not parse the JSON body of your request: {detail}."


def deeper_than(value: object, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` levels (iteratively: no
    recursion to run out of)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
