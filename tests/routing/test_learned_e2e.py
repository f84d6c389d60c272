"""The learned route through a real gateway process and the official SDK: the score
picks the tier, `x-gateway-route` says so, the ledger record carries the score, and a
route whose weights file cannot be read still serves, by its fallback strategy."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import openai

from gateway.metering.ledger_record import LedgerRecord
from tests.e2e.support import ledger_records, store_config
from tests.fakes.openai_server import OpenAIFake
from tests.routing.learned_support import EASY, HARD, shipped_scorer
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

KEY = "gw-test-learned"


def policy(threshold: float, broken: Path) -> dict[str, Any]:
    def model(upstream: str, price: float, quality: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": price, "output": price},
            "quality": {"general": quality},
        }

    tiers = {"strong": ["big"], "cheap": ["small"], "threshold": threshold}
    return {
        "models": {"big": model("big-up", 8, 0.9), "small": model("small-up", 0.4, 0.8)},
        "routes": {
            "tiers": {"strategy": "learned", "models": ["big", "small"], "learned": tiers},
            "broken": {
                "strategy": "learned",
                "models": ["big", "small"],
                "learned": {**tiers, "scorer": str(broken)},
            },
        },
        "tenants": {"acme": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


def test_learned_routing_end_to_end(tmp_path: Path) -> None:
    scorer = shipped_scorer()
    low, high = sorted((scorer.score(EASY), scorer.score(HARD)))
    assert low < high
    higher, lower = (HARD, EASY) if scorer.score(HARD) > scorer.score(EASY) else (EASY, HARD)
    threshold = round((low + high) / 2, 6)
    broken = tmp_path / "broken.bin"
    broken.write_bytes(b"not weights")
    redis = RedisServer()
    redis.start()
    try:
        with OpenAIFake() as fake:
            config = {
                "providers": {"fake": openai_provider(fake.base_url)},
                "store": store_config(redis.url, timeout_ms=500),
            }
            with GatewayProcess(config, policy(threshold, broken)) as gateway:
                client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)

                def ask(route: str, text: str) -> Any:
                    return client.chat.completions.with_raw_response.create(
                        model=route, messages=[{"role": "user", "content": text}], max_tokens=5
                    )

                strong, cheap, fallback = (
                    ask("tiers", higher),
                    ask("tiers", lower),
                    ask("broken", higher),
                )
                ids = {r.headers["x-request-id"] for r in (strong, cheap, fallback)}
                records = _wait_for_records(redis.url, ids)
    finally:
        redis.stop()
    assert strong.headers["x-gateway-model"] == "big"
    assert (
        f"reason=learned-strong-score-{scorer.score(higher):.3f}"
        in strong.headers["x-gateway-route"]
    )
    assert cheap.headers["x-gateway-model"] == "small"
    assert "reason=learned-cheap-score-" in cheap.headers["x-gateway-route"]
    assert fallback.headers["x-gateway-model"] == "small"
    assert "reason=learned-unavailable+cheapest" in fallback.headers["x-gateway-route"]
    by_id = {r.request_id: r for r in records}
    served = by_id[strong.headers["x-request-id"]]
    assert served.route == "tiers" and served.route_scorer == "ngram-v1"
    assert served.route_score is not None and abs(served.route_score - scorer.score(higher)) < 1e-9
    assert served.route_threshold == threshold
    unscored = by_id[fallback.headers["x-request-id"]]
    assert unscored.route_score is None and unscored.route_threshold == threshold


def _wait_for_records(url: str, request_ids: set[str]) -> list[LedgerRecord]:
    """The ledger is written after the response, in the background: wait for all of them
    (generously: the suite shares two cores with others)."""
    deadline = time.monotonic() + 60
    while True:
        records = ledger_records(url)
        if request_ids <= {r.request_id for r in records} or time.monotonic() > deadline:
            return records
        time.sleep(0.1)
