"""The console's spend on a Redis-backed gateway reads whole UTC days from the ledger's
counters: it counts every request even when the ledger's stream keeps only the newest
(`store.ledger_stream_max_records`)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path

import httpx

from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger import Ledger, LedgerRetention
from tests.metering.support import client, make_record, today_midnight
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

ADMIN_KEY = "gw-console-ledger-admin"
TODAY = today_midnight()
YESTERDAY = TODAY - timedelta(days=1)


def test_console_spend_counts_every_request_past_a_capped_stream(
    redis_db: RedisServer, tmp_path: Path
) -> None:
    records = [make_record(n, YESTERDAY, prefix="console") for n in range(1_200)] + [
        make_record(n, TODAY, prefix="console") for n in range(1_200, 2_400)
    ]

    async def write() -> int:
        redis = client(redis_db.port)
        ledger = Ledger(
            redis, keys=LedgerKeys("gw"), retention=LedgerRetention(stream_max_records=1_000)
        )
        for record in records:
            ledger.record(record)
        await ledger.close()
        kept = await redis.xlen(LedgerKeys("gw").stream)
        await redis.aclose()
        return kept

    assert asyncio.run(write()) < 1_100  # the stream let most of them go

    config = {
        "server": {"admin_key_hash": key_hash(ADMIN_KEY)},
        "store": {
            "kind": "redis",
            "redis_url": redis_db.url,
            "cluster": False,
            "spill_dir": str(tmp_path / "spill"),
            "ledger_stream_max_records": 1_000,
        },
        "providers": {"fake": openai_provider("http://127.0.0.1:1/v1")},
    }
    policy = {
        "models": {"m": {"deployments": [{"provider": "fake", "upstream_model": "u"}]}},
        "routes": {"auto": {"models": ["m"]}},
        "tenants": {"acme": {"keys": []}},
    }
    with (
        GatewayProcess(config, policy) as gateway,
        httpx.Client(base_url=gateway.url, timeout=30) as browser,
    ):
        browser.post("/console/login", data={"admin_key": ADMIN_KEY})
        page = browser.get("/console", params={"range": "7d"}).text
    by_day = dict(
        re.findall(
            r"<tr><td>(\d{4}-\d{2}-\d{2})</td><td class=n>\$[^<]*</td><td class=n>(\d+)</td>", page
        )
    )
    assert by_day == {YESTERDAY.date().isoformat(): "1200", TODAY.date().isoformat(): "1200"}
    tenants = re.search(r'<table id="spend-by-tenant".*?</table>', page)
    assert tenants is not None
    counts = re.findall(r"<td class=n>\$[^<]*</td><td class=n>(\d+)</td>", tenants.group(0))
    assert sum(map(int, counts)) == 2_400
