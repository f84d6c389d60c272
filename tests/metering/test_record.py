"""`LedgerRecord.settled` puts every argument in the field of its name."""

from __future__ import annotations

from decimal import Decimal

import msgspec

from gateway.metering.record import LedgerRecord
from gateway.usage import Usage


def test_settled_fills_each_field_from_the_argument_of_its_name() -> None:
    usage = Usage(
        input_tokens=11,
        cached_input_tokens=12,
        cache_write_tokens=13,
        output_tokens=14,
        reasoning_tokens=15,
        estimated=True,
    )
    given: dict[str, object] = {
        "time": 1.5,
        "request_id": "req-a",
        "tenant": "tenant-b",
        "key_id": "key-c",
        "model": "model-d",
        "provider": "provider-e",
        "deployment": "deployment-f",
        "status": 201,
        "route": "route-g",
        "latency_ms": 2.5,
        "ttft_ms": 3.5,
        "retries": 4,
        "fallback_from": "fallback-h",
        "route_score": 0.25,
        "route_threshold": 0.75,
        "route_scorer": "scorer-i",
    }
    record = LedgerRecord.settled(usage=usage, cost=Decimal("0.000123"), **given)  # type: ignore[arg-type]
    expected = {
        **given,
        "cost_usd": "0.000123",
        "input_tokens": 11,
        "cached_input_tokens": 12,
        "cache_write_tokens": 13,
        "output_tokens": 14,
        "reasoning_tokens": 15,
        "estimated": True,
    }
    assert msgspec.structs.asdict(record) == expected
    assert record == LedgerRecord(**expected)  # type: ignore[arg-type]
