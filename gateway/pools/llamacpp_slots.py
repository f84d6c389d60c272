"""What llama-server's `/slots` page says: how many slots it has and how full its KV is.

llama-server runs at most `--parallel N` requests at once, one per slot; a request sent
while every slot is busy waits in the server's deferred queue, where the gateway can no
longer move it to an idle replica. So the slot count is the natural per-replica in-flight
cap, and the pool takes it from here unless `max_inflight_per_replica` is set.

`GET /slots` is a JSON list, one object per slot:

    [{"id": 0, "n_ctx": 4096, "is_processing": true, "n_prompt_tokens": 1830, ...}, ...]

`n_ctx` is the slot's share of the context (its KV cells) and `n_prompt_tokens` the
tokens its cache holds (prompt and generated so far). KV use counts the busy slots'
tokens over every slot's cells: an idle slot's tokens are a reusable prefix, not load,
just as SGLang's `token_usage` leaves its evictable radix cache out.
"""

from __future__ import annotations

from dataclasses import replace

import msgspec

from gateway.pools.scraped import ScrapedLoad


class SlotsPage(msgspec.Struct, frozen=True):
    slots: int
    busy: int
    kv_usage: float


class _Slot(msgspec.Struct):
    n_ctx: int = 0
    is_processing: bool = False
    n_prompt_tokens: int = 0


_decoder = msgspec.json.Decoder(list[_Slot])


def parse_slots(body: bytes) -> SlotsPage:
    """Raises ValueError when `body` is not a `/slots` page."""
    try:
        slots = _decoder.decode(body)
    except msgspec.DecodeError as error:
        raise ValueError(f"not a llama-server /slots page: {error}") from None
    cells = sum(slot.n_ctx for slot in slots)
    held = sum(slot.n_prompt_tokens for slot in slots if slot.is_processing)
    return SlotsPage(
        slots=len(slots),
        busy=sum(slot.is_processing for slot in slots),
        kv_usage=min(1.0, held / cells) if cells else 0.0,
    )


def with_slots(load: ScrapedLoad, page: SlotsPage | None) -> ScrapedLoad:
    """`load` from `/metrics` completed by the `/slots` page: the slot count always, the KV
    use when `/metrics` did not carry it (current servers do not)."""
    if page is None:
        return load
    kv_usage = load.kv_usage if load.kv_usage else page.kv_usage
    return replace(load, slots=page.slots, kv_usage=kv_usage)
