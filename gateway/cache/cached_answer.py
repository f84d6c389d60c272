"""One cached answer, kept as the ingress encoder's input rather than the bytes the first
client got: a hit is encoded again for the client asking now (its request id, its
`stream_options`, a cost of 0), so a replayed stream ends exactly as a live one does.

    whole answer:  `body`, the chat.completion (or the same-API upstream's own body)
    stream:        `payloads`, every translated payload in order, then `held`, what the
                   translation held back for the encoder's closing frames

Entries are msgpack: payloads are bytes, and JSON would base64 them."""

from __future__ import annotations

import msgspec

from gateway.usage import Usage


class CachedAnswer(msgspec.Struct, frozen=True, array_like=True):
    api: str
    stream: bool
    # the answer is in the client's own API (a same-API upstream), not chat
    native: bool
    model: str
    provider: str
    deployment: str
    usage: Usage
    # what the answer cost when it was served (a Decimal as a string): a hit's saving
    cost_usd: str
    # unix seconds when it was stored (a hit's `age` header)
    stored_at: float
    body: bytes = b""
    payloads: list[bytes] = msgspec.field(default_factory=list)
    held: list[bytes] = msgspec.field(default_factory=list)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CachedAnswer)


def encode_answer(answer: CachedAnswer) -> bytes:
    return _encoder.encode(answer)


def decode_answer(data: bytes) -> CachedAnswer | None:
    """None for an entry this version cannot read (written by another version)."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
