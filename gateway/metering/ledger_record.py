"""One ledger record per request: what was asked, who asked, what it cost.

Costs travel as decimal strings (`cost_usd`) so no float ever touches money; aggregate
counters hold integer nano-dollars (`cost_nanousd`), which represent every published
price exactly (a price per million tokens with up to three decimals is a whole number of
nano-dollars per token), so counters summed by Redis `HINCRBY` match the records.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import msgspec

from gateway.usage import Usage

NANOS_PER_USD = Decimal(1_000_000_000)
# the HTTP status recorded when the client went away before the response ended (nginx's)
CLIENT_CLOSED_REQUEST = 499

TOKEN_KINDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)


def usd_to_nanos(amount: Decimal) -> int:
    return int((amount * NANOS_PER_USD).to_integral_value(rounding=ROUND_HALF_EVEN))


def nanos_to_usd(nanos: int) -> Decimal:
    return Decimal(nanos) / NANOS_PER_USD


class LedgerRecord(msgspec.Struct, frozen=True):
    """A settled request. `key_id` is the key's configured id, never the key itself.

    Build one with `settled`, or with keywords. Positional arguments are allowed (no
    `kw_only`) only so that `settled`, once per request, skips msgspec's keyword matching."""

    time: float  # unix seconds when the request arrived
    request_id: str
    tenant: str
    key_id: str
    model: str
    provider: str
    deployment: str
    status: int
    cost_usd: str  # a Decimal as a string
    route: str = ""
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    retries: int = 0
    fallback_from: str = ""
    # requests planned on a `learned` route: the scorer's probability that the strong tier
    # was needed (None when it had no score and the route fell back), the route's
    # threshold then, and the scorer's name; re-calibration joins these with outcomes
    route_score: float | None = None
    route_threshold: float | None = None
    route_scorer: str = ""
    # what makes a record written once: an id the gateway mints for every request. The
    # request id may be the client's own `x-request-id`, which a client can repeat (a
    # tracing id per session); "" (records from before this field): the request id
    record_id: str = ""
    # the response cache: "hit" (answered from it at cost 0), "miss", "bypass" (the
    # client asked for none); "" where no cache applies. A hit's `saved_usd` is what the
    # answer cost when it was served (a Decimal as a string), "" otherwise
    cache: str = ""
    saved_usd: str = ""
    # what the call was for: "" a client's request, "evaluation" a reference or judge
    # call the gateway made to evaluate one (docs/evaluation.md)
    kind: str = ""
    # what the gateway changed in the request it sent upstream, as x-gateway-route's
    # `changed=` list says it ("max_tokens:32000->8192,dropped-beta:..."); "" for none
    changed: str = ""

    @property
    def once_key(self) -> str:
        """The id a retried write recognises this record by."""
        return self.record_id or self.request_id

    @classmethod
    def settled(
        cls,
        *,
        time: float,
        request_id: str,
        tenant: str,
        key_id: str,
        model: str,
        provider: str,
        deployment: str,
        status: int,
        usage: Usage,
        cost: Decimal,
        route: str = "",
        latency_ms: float = 0.0,
        ttft_ms: float | None = None,
        retries: int = 0,
        fallback_from: str = "",
        route_score: float | None = None,
        route_threshold: float | None = None,
        route_scorer: str = "",
        record_id: str = "",
        cache: str = "",
        saved_usd: Decimal | None = None,
        kind: str = "",
        changed: str = "",
    ) -> LedgerRecord:
        """A record from the normalized usage and its exact cost."""
        # positional, in field order (a keyword call costs ~4x); test_record pins the order
        return cls(
            time,
            request_id,
            tenant,
            key_id,
            model,
            provider,
            deployment,
            status,
            str(cost),
            route,
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
            usage.reasoning_tokens,
            usage.estimated,
            latency_ms,
            ttft_ms,
            retries,
            fallback_from,
            route_score,
            route_threshold,
            route_scorer,
            record_id,
            cache,
            "" if saved_usd is None else str(saved_usd),
            kind,
            changed,
        )

    @property
    def cost(self) -> Decimal:
        return Decimal(self.cost_usd)

    @property
    def cost_nanousd(self) -> int:
        return usd_to_nanos(self.cost)

    @property
    def day(self) -> str:
        """The UTC day the request belongs to, `YYYY-MM-DD`."""
        return utc_day(self.time)

    @property
    def month(self) -> str:
        return self.day[:7]

    def tokens_by_kind(self) -> dict[str, int]:
        """Token counts keyed by kind (`input`, `cached_input`, ...), for metrics."""
        return {kind.removesuffix("_tokens"): getattr(self, kind) for kind in TOKEN_KINDS}

    def to_json(self) -> str:
        """The record as one JSON object: a stream entry's `record` field, a spill line."""
        return _ENCODER.encode(self).decode()

    def to_json_bytes(self) -> bytes:
        """`to_json` as UTF-8 bytes, what a Redis command carries."""
        return _ENCODER.encode(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> LedgerRecord:
        """Inverse of `to_json`; fields it does not know (a newer writer's) are ignored."""
        return _DECODER.decode(data)


def utc_day(when: float) -> str:
    """`YYYY-MM-DD` of a unix time, in UTC; every record of a day asks, so it is kept."""
    start, end, day = _LAST_DAY
    if start <= when < end:  # the day most records ask about: two comparisons
        return str(day)
    # to the microsecond first, as datetime rounds: 23:59:59.9999996 is the next day
    number = int(round(when, 6) // 86_400)
    found = _DAYS.get(number)
    if found is None:
        if len(_DAYS) > 64:
            _DAYS.clear()
        found = _DAYS[number] = datetime.fromtimestamp(number * 86_400, UTC).date().isoformat()
    # the fast path stays a second clear of midnight, where rounding decides the day
    _LAST_DAY[:] = (number * 86_400 + 1.0, (number + 1) * 86_400 - 1.0, found)
    return found


_LAST_DAY: list[Any] = [0.0, 0.0, ""]
_DAYS: dict[int, str] = {}
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(LedgerRecord)
