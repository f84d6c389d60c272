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
    of whoever produced them), messages become plain assistant messages, and reasoning
    items without their encrypted content are dropped (no upstream can read them back)."""
    items = [dict(item) for item in record.input_items]
    for item in record.response.get("output") or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning" and not item.get("encrypted_content"):
            continue
        if kind == "message":
            # as an "easy" message: the one assistant form every Responses upstream
            # accepts without the item ids of the store that produced it
            parts = [p for p in item.get("content") or () if isinstance(p, dict)]
            text = "".join(str(p.get("text") or p.get("refusal") or "") for p in parts)
            items.append({"type": "message", "role": "assistant", "content": text})
            continue
        items.append({k: v for k, v in item.items() if k not in ("id", "status")})
    return items


# -- GET /v1/responses/{id}/input_items ------------------------------------------------


def _listed_item(item: dict[str, Any], item_id: str) -> dict[str, Any]:
    """A stored input item as the API lists it: with an id and a status, and message
    content as parts."""
    listed = {"id": item_id, **item}
    kind = listed.setdefault("type", "message")
    if kind == "message":
        content = listed.get("content")
        assistant = listed.get("role") == "assistant"
        if isinstance(content, str):
            part_type = "output_text" if assistant else "input_text"
            listed["content"] = [{"type": part_type, "text": content}]
        if assistant:
            listed["content"] = [
                {**part, "annotations": part.get("annotations", [])}
                if part.get("type") == "output_text"
                else part
                for part in listed["content"]
            ]
    listed.setdefault("status", "completed")
    return listed


def item_list(
    items: list[dict[str, Any]],
    response_id: str,
    *,
    order: str = "desc",
    limit: int = 20,
    after: str | None = None,
) -> dict[str, Any]:
    """The input items of a stored response as a page (newest first by default, as
    OpenAI lists them)."""
    suffix = response_id.removeprefix("resp_")
    listed = [
        _listed_item(item, str(item.get("id") or f"item_{suffix}{n:03d}"))
        for n, item in enumerate(items)
    ]
    if order == "desc":
        listed.reverse()
    if after is not None:
        ids = [item["id"] for item in listed]
        listed = listed[ids.index(after) + 1 :] if after in ids else []
    page = listed[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else "",
        "last_id": page[-1]["id"] if page else "",
        "has_more": len(listed) > len(page),
    }
