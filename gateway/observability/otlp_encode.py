"""The OTLP `ExportTraceServiceRequest` protobuf, written straight from ended spans.

The SDK's encoder builds a protobuf message object per span, attribute and value, then
serialises them: ~75 us of CPU per span here, most of what tracing cost a request. The
message is simple (opentelemetry/proto/trace/v1/trace.proto), so it is written here
directly, field by field, for the spans the gateway makes: one resource, one scope,
attributes of str, bool, int, float and lists of str. The tests decode what this writes
with opentelemetry-proto's own classes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]
# the tag of a length-delimited field, per field number
_TAGS = [bytes(((n << 3) | 2,)) for n in range(16)]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (strings, bytes, messages)."""
    size = len(payload)
    return _TAGS[number] + (_ONE_BYTE[size] if size < 0x80 else _varint(size)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(v)) for v in value))
    return _field(1, str(value).encode())


def attributes(values: Mapping[str, Any], number: int) -> bytes:
    """Each attribute as a KeyValue in field `number` of its message."""
    return b"".join(
        _field(number, _field(1, key.encode()) + _field(2, _any_value(value)))
        for key, value in values.items()
    )


def resource_and_scope(resource: Mapping[str, Any], scope_name: str) -> tuple[bytes, bytes]:
    """The Resource message and the InstrumentationScope message, written once."""
    return attributes(resource, 1), _field(1, scope_name.encode())


def span(readable: ReadableSpan) -> bytes:
    context = readable.context
    assert context is not None
    out = [
        _field(1, context.trace_id.to_bytes(16, "big")),
        _field(2, context.span_id.to_bytes(8, "big")),
    ]
    parent = readable.parent
    if parent is not None:
        out.append(_field(4, parent.span_id.to_bytes(8, "big")))
    out.append(_field(5, readable.name.encode()))
    # OTLP's SpanKind counts from UNSPECIFIED = 0; the API's from INTERNAL = 0
    out.append(b"\x30" + _varint(readable.kind.value + 1))
    out.append(b"\x39" + _FIXED64.pack(readable.start_time or 0))
    out.append(b"\x41" + _FIXED64.pack(readable.end_time or 0))
    if readable.attributes:
        out.append(attributes(readable.attributes, 9))
    status = readable.status
    body = _field(2, status.description.encode()) if status.description else b""
    if status.status_code is not StatusCode.UNSET:
        body += b"\x18" + _varint(status.status_code.value)
    out.append(_field(15, body))
    # flags, as the SDK writes them: whether the parent is remote is known (0x100), and is
    # (0x200)
    flags = 0x100
    if parent is not None and parent.is_remote:
        flags |= 0x200
    out.append(b"\x85\x01" + _FIXED32.pack(flags))
    return b"".join(out)


def export_request(spans: Sequence[ReadableSpan], resource: bytes, scope: bytes) -> bytes:
    """An ExportTraceServiceRequest of `spans`, all of one resource and scope."""
    scope_spans = _field(1, scope) + b"".join(_field(2, span(s)) for s in spans)
    resource_spans = _field(1, resource) + _field(2, scope_spans)
    return _field(1, resource_spans)
