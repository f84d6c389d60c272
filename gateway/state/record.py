"""One stored response: the Response object the client saw and the conversation's input
items that produced it (earlier turns included), so a continuation is one read however
long the conversation, and survives an earlier turn's expiry."""

from __future__ import annotations

from typing import Any

import msgspec


class StoredResponse(msgspec.Struct, frozen=True):
    id: str
    created_at: int
    # the Response object as sent to the client (also what GET /v1/responses/{id} returns)
    response: dict[str, Any]
    # every input item of the conversation up to this response, oldest first
    input_items: list[dict[str, Any]]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StoredResponse)


def encode_record(record: StoredResponse) -> bytes:
    return _encoder.encode(record)


def decode_record(data: bytes) -> StoredResponse:
    return _decoder.decode(data)


def continuation_items(record: StoredResponse) -> list[dict[str, Any]]:
    """The input items a follow-up to `record` starts from: its inputs, then its output
    items as inputs. Output ids and statuses are dropped (they name items in the store
    of whoever produced them), and reasoning items without their encrypted content are
    dropped (no upstream can read them back)."""
    items = [dict(item) for item in record.input_items]
    for item in record.response.get("output") or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning" and not item.get("encrypted_content"):
            continue
        kept = {k: v for k, v in item.items() if k not in ("id", "status")}
        if kind == "message":
            kept["content"] = [
                {k: v for k, v in part.items() if k in ("type", "text", "refusal")}
                for part in item.get("content") or ()
                if isinstance(part, dict)
            ]
        items.append(kept)
    return items
