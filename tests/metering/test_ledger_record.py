"""`LedgerRecord.settled` puts every argument in the field of its name."""

from __future__ import annotations

from decimal import Decimal

import msgspec

from gateway.metering.ledger_record import LedgerRecord
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
        "record_id": "rec-j",
        "cache": "hit",
        "kind": "evaluation",
        "changed": "max_tokens:32000->8192",
    }
    record = LedgerRecord.settled(
        usage=usage,
        cost=Decimal("0.000123"),
        saved_usd=Decimal("0.0042"),
        **given,  # type: ignore[arg-type]
    )
    expected = {
        **given,
        "cost_usd": "0.000123",
        "saved_usd": "0.0042",
        "input_tokens": 11,
        "cached_input_tokens": 12,
        "cache_write_tokens": 13,
        "output_tokens": 14,
        "reasoning_tokens": 15,
        "estimated": True,
    }
    assert msgspec.structs.asdict(record) == expected
    assert record == LedgerRecord(**expected)  # type: ignore[arg-type]


def test_a_record_is_once_by_its_minted_id_and_old_records_by_their_request_id() -> None:
    usage = Usage(input_tokens=1, output_tokens=1)
    common: dict[str, object] = {
        "time": 1.0, "request_id": "trace-1", "tenant": "t", "key_id": "k", "model": "m",
        "provider": "p", "deployment": "d", "status": 200,
    }  # fmt: skip
    new = LedgerRecord.settled(usage=usage, cost=Decimal(0), record_id="req_x1", **common)  # type: ignore[arg-type]
    assert new.once_key == "req_x1"
    # a record written before record_id existed (the stream, a spill file) decodes as before
    old_json = msgspec.json.encode({**common, "cost_usd": "0"})
    old = msgspec.json.decode(old_json, type=LedgerRecord)
    assert old.record_id == "" and old.once_key == "trace-1"
