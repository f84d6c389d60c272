"""`store.ledger_stream_retention_seconds` and `store.ledger_stream_max_records`: the
Redis ledger stream's bounds, refused at load when they would keep nothing, and handed
to the ledger writer the gateway builds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.metering.ledger import STREAM_MAX_RECORDS, Ledger, LedgerRetention
from gateway.pipeline.stores import open_stores
from gateway.settings import SettingsError, load_settings
from gateway.settings.server import StoreSettings
from tests.settings.test_check import CONFIG, write
from tests.support.redis_server import RedisServer


def test_the_defaults_keep_31_days_or_a_million_records() -> None:
    store = StoreSettings()
    assert store.ledger_stream_retention_seconds == 31 * 86_400
    assert store.ledger_stream_max_records == 1_000_000 == STREAM_MAX_RECORDS
    assert LedgerRetention().stream_seconds == store.ledger_stream_retention_seconds


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("ledger_stream_max_records", 0),
        ("ledger_stream_max_records", -1),
        # below a few stream nodes, approximate trimming's slack is most of the bound
        ("ledger_stream_max_records", 999),
        ("ledger_stream_retention_seconds", 0),
        ("ledger_stream_retention_seconds", -86_400),
    ],
)
def test_a_bound_that_keeps_nothing_is_refused(setting: str, value: int) -> None:
    with pytest.raises(ValidationError) as refused:
        StoreSettings.model_validate({setting: value})
    (error,) = refused.value.errors()
    assert error["loc"] == (setting,) and error["type"] == "greater_than_equal"


def test_the_config_file_error_names_the_key_path(tmp_path: Path) -> None:
    config = CONFIG + "store:\n  ledger_stream_max_records: 0\n"
    with pytest.raises(SettingsError) as refused:
        load_settings(write(tmp_path, config))
    (problem,) = refused.value.problems
    assert "store.ledger_stream_max_records" in problem
    assert "greater than or equal to 1000" in problem


def test_the_redis_ledger_is_built_with_the_configured_bounds(redis_db: RedisServer) -> None:
    settings = StoreSettings.model_validate(
        {
            "kind": "redis",
            "redis_url": redis_db.url,
            "ledger_stream_retention_seconds": 7 * 86_400,
            "ledger_stream_max_records": 250_000,
        }
    )

    async def scenario() -> LedgerRetention:
        stores = await open_stores(settings)
        try:
            assert isinstance(stores.ledger, Ledger)
            return stores.ledger.retention
        finally:
            await stores.close(grace_seconds=1.0)

    retention = asyncio.run(scenario())
    assert (retention.stream_seconds, retention.stream_max_records) == (7 * 86_400, 250_000)
    # the counters' retention is not the stream's
    assert retention.day_aggregate_seconds == LedgerRetention().day_aggregate_seconds
