"""The multi-model learned route through a real gateway process and the official SDK:
the predicted qualities pick the cheapest model above the target, `x-gateway-route`
carries them, a failing upstream falls back in the plan's order, and the ledger record
keeps the score."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import openai

from gateway.metering.ledger_record import LedgerRecord
from gateway.routing.learned.quality import QualityHead, QualityHeads, encode_heads
from tests.e2e.support import ledger_records, store_config
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.routing.learned_support import EASY, HARD, shipped_scorer
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

KEY = "gw-test-learned-multi"


def write_heads(path: Path) -> None:
    """small's predicted quality is 1 - score (worse on prompts scored harder); mid and
    big are predicted 0.90 and 0.95 whatever the prompt."""

    def constant(p: float) -> QualityHead:
        return QualityHead(bias=math.log(p / (1 - p)), slope=0.0)

    heads = {"j-small": QualityHead(0.0, -1.0), "j-mid": constant(0.9), "j-big": constant(0.95)}
    path.write_text(encode_heads(QualityHeads("e2e", "ngram-v1", heads)))


def policy(heads: Path, target: float) -> dict[str, Any]:
    def model(upstream: str, price: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": price, "output": price},
            "quality": {"general": 0.8},
        }

    learned = {
        "strong": ["big"],
        "cheap": ["small", "mid"],
        "choice": "cheapest_above",
        "target": target,
        "quality": str(heads),
        "stand_ins": {"small": "j-small", "mid": "j-mid", "big": "j-big"},
    }
    return {
        "models": {
            "small": model("small-up", 0.4),
            "mid": model("mid-up", 2),
            "big": model("big-up", 8),
        },
        "routes": {
            "multi": {"strategy": "learned", "models": ["big", "mid", "small"], "learned": learned}
        },
        "tenants": {"acme": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


def test_cheapest_above_target_end_to_end(tmp_path: Path) -> None:
    scorer = shipped_scorer()
    easier, harder = sorted((EASY, HARD), key=scorer.score)
    assert scorer.score(easier) < scorer.score(harder)
    # small (1 - score) clears for the easier prompt only
    target = round(1 - (scorer.score(easier) + scorer.score(harder)) / 2, 6)
    heads = tmp_path / "heads.json"
    write_heads(heads)
    redis = RedisServer()
    redis.start()
    try:
        with OpenAIFake() as fake:
            config = {
                "providers": {"fake": openai_provider(fake.base_url, retry={"max_attempts": 1})},
                "store": store_config(redis.url, timeout_ms=500),
            }
            with GatewayProcess(config, policy(heads, target)) as gateway:
                client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)

                def ask(text: str) -> Any:
                    return client.chat.completions.with_raw_response.create(
                        model="multi", messages=[{"role": "user", "content": text}], max_tokens=5
                    )

                cheap, middle = ask(easier), ask(harder)
                fake.enqueue(Reply.error(503, "mid is down"))
                fell_back = ask(harder)
                ids = {r.headers["x-request-id"] for r in (cheap, middle, fell_back)}
                records = _wait_for_records(redis.url, ids)
    finally:
        redis.stop()
    assert cheap.headers["x-gateway-model"] == "small"
    assert middle.headers["x-gateway-model"] == "mid"
    route = middle.headers["x-gateway-route"]
    assert f"reason=learned-cheapest-above-{target:.3f}-score-{scorer.score(harder):.3f}" in route
    assert f"small:{1 - scorer.score(harder):.3f}" in route and "mid:0.900" in route
    # mid failed: the next model above the target serves
    assert fell_back.headers["x-gateway-model"] == "big"
    assert "fallback-from=mid:503" in fell_back.headers["x-gateway-route"]
    served = {r.request_id: r for r in records}[middle.headers["x-request-id"]]
    assert served.route == "multi" and served.route_scorer == "ngram-v1"
    assert served.route_score is not None
    assert abs(served.route_score - scorer.score(harder)) < 1e-9


def _wait_for_records(url: str, request_ids: set[str]) -> list[LedgerRecord]:
    deadline = time.monotonic() + 60
    while True:
        records = ledger_records(url)
        if request_ids <= {r.request_id for r in records} or time.monotonic() > deadline:
            return records
        time.sleep(0.1)
