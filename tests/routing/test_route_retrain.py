"""`gateway route retrain` / `rollback` against a real Redis, and a real gateway process
that serves the promoted version: a candidate is promoted only when its out-of-fold
evidence beats the served version and prompt length, every promotion and rollback is an
audit entry, and a replica picks the current version up on its own."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from redis.asyncio import Redis

from gateway.admin import RedisAdminStore
from gateway.cli.fitting_input import InputError
from gateway.cli.main import main
from gateway.cli.route_retrain import every_seconds
from gateway.routing.learned.promotion import RouterEvidence, promotion_verdict
from gateway.state.scorer_versions import KEEP, ScorerVersions
from tests.fakes.openai_server import OpenAIFake
from tests.routing.test_route_train_labels import graded_lines
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

KEY = "gw-test-retrain"


def gateway_policy() -> dict[str, Any]:
    def model(upstream: str, price: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": price, "output": price},
        }

    learned = {"scorer": "redis:kept", "strong": ["big"], "cheap": ["small"], "threshold": 0.5}
    return {
        "models": {"big": model("big-up", 8), "small": model("small-up", 0.4)},
        "routes": {"kept": {"strategy": "learned", "models": ["big", "small"], "learned": learned}},
        "tenants": {"acme": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


def write_config(tmp_path: Path, redis_url: str, upstream: str = "http://127.0.0.1:9/v1") -> Path:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(gateway_policy()))
    config = {
        "providers": {"fake": openai_provider(upstream)},
        "store": {"kind": "redis", "redis_url": redis_url},
        "policies": ["policy.yaml"],
    }
    (tmp_path / "gateway.yaml").write_text(json.dumps(config))
    return tmp_path / "gateway.yaml"


def flipped(lines: list[str]) -> list[str]:
    """The same prompts after the traffic changed: the reference now wins big on `gamma`
    prompts and loses on `alpha` ones (v1 ranks these labels backwards)."""
    out = []
    for line in lines:
        item = json.loads(line)
        word = item["prompt"].split()[0]
        if word == "alpha":
            item["strong_quality"], item["weak_quality"] = 0.2, 0.8
        elif word == "gamma":
            item["strong_quality"], item["weak_quality"] = 1.0, 0.1
        out.append(json.dumps(item))
    return out


def labels_file(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def redis_state(url: str, route: str = "kept") -> tuple[int | None, list[dict[str, str]]]:
    async def read() -> tuple[int | None, list[dict[str, str]]]:
        client = Redis.from_url(url)
        try:
            current = await ScorerVersions(client, route).current()
            audit = await RedisAdminStore(client).audit(10)
            return current, [entry.fields for entry in audit]
        finally:
            await client.aclose()

    return asyncio.run(read())


def retrain(config: Path, labels: Path) -> int:
    return main(["route", "retrain", "--config", str(config), "--route", "kept",
                 "--from-labels", str(labels)])  # fmt: skip


def test_promotion_rule_needs_the_interval_low_above_the_served_scorer_and_length() -> None:
    length = RouterEvidence(0.55, 0.50, 0.60)
    assert promotion_verdict(RouterEvidence(0.70, 0.62, 0.78), None, length).promote
    assert not promotion_verdict(RouterEvidence(0.70, 0.54, 0.80), None, length).promote
    current = RouterEvidence(0.65, 0.60, 0.70)
    kept = promotion_verdict(RouterEvidence(0.70, 0.63, 0.78), current, length)
    assert not kept.promote and "the current scorer's APGR 0.650" in kept.reason
    assert promotion_verdict(RouterEvidence(0.75, 0.66, 0.80), current, length).promote
    nan = float("nan")
    assert not promotion_verdict(RouterEvidence(nan, nan, nan), None, length).promote


def test_every_takes_a_duration_and_refuses_anything_else() -> None:
    assert every_seconds("6h") == 21600 and every_seconds("90s") == 90
    for bad in ("6", "0h", "soon", "-1h"):
        with pytest.raises(InputError, match="expected a duration"):
            every_seconds(bad)


def test_retrain_promotes_on_evidence_keeps_otherwise_and_rollback_restores(
    tmp_path: Path, fresh_redis: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, fresh_redis.url)
    lines = graded_lines()
    first = labels_file(tmp_path, "week1.jsonl", lines)
    assert retrain(config, first) == 0
    printed = capsys.readouterr().out
    assert "promoted: APGR" in printed and "version 1 is now current (was none)" in printed
    current, audit = redis_state(fresh_redis.url)
    assert current == 1
    assert audit[0]["action"] == "scorer.promote" and audit[0]["target"] == "kept"
    assert json.loads(audit[0]["detail"])["version"] == 1

    # the same labels again: the served version saw them; the candidate cannot beat it
    assert retrain(config, first) == 0
    printed = capsys.readouterr().out
    assert "kept: the candidate's APGR interval low" in printed
    assert "the current scorer's APGR" in printed
    assert redis_state(fresh_redis.url)[0] == 1

    # the traffic changed: v1 ranks the new labels backwards, the candidate wins
    second = labels_file(tmp_path, "week2.jsonl", flipped(lines))
    assert retrain(config, second) == 0
    assert "version 2 is now current (was 1)" in capsys.readouterr().out

    assert main(["route", "rollback", "kept", "--config", str(config)]) == 0
    assert "version 1 is now current (was 2)" in capsys.readouterr().out
    current, audit = redis_state(fresh_redis.url)
    assert current == 1 and audit[0]["action"] == "scorer.rollback"
    assert json.loads(audit[0]["detail"]) == {
        "previous": 2, "version": 1, "why": "rolled back by hand to v1"
    }  # fmt: skip
    assert main(["route", "rollback", "kept", "--config", str(config), "--to", "2"]) == 0
    assert redis_state(fresh_redis.url)[0] == 2
    capsys.readouterr()
    assert main(["route", "rollback", "kept", "--config", str(config), "--to", "99"]) == 1
    assert "route kept has no stored version 99" in capsys.readouterr().err
    assert main(["route", "rollback", "kept", "--config", str(config), "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("* v2") and listed[1].startswith("  v1")


def test_retrain_refuses_a_route_that_does_not_serve_versions_and_a_store_without_redis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "redis://127.0.0.1:9/0")
    labels = labels_file(tmp_path, "l.jsonl", graded_lines())
    code = main(["route", "retrain", "--config", str(config), "--route", "nope",
                 "--from-labels", str(labels)])  # fmt: skip
    assert code == 1 and "--route nope: no such route" in capsys.readouterr().err
    memory = json.loads(config.read_text())
    memory["store"] = {"kind": "memory"}
    config.write_text(json.dumps(memory))
    assert retrain(config, labels) == 1
    assert "store.kind must be redis" in capsys.readouterr().err


def test_stored_versions_stay_bounded(fresh_redis: RedisServer) -> None:
    async def run() -> tuple[list[int], int | None]:
        client = Redis.from_url(fresh_redis.url)
        try:
            store = ScorerVersions(client, "kept")
            first = await store.publish(b"v1", {"n": 1})
            await store.promote(first)
            for n in range(KEEP + 5):
                await store.publish(f"v{n + 2}".encode(), {"n": n + 2})
            return [v.version for v in await store.history()], await store.current()
        finally:
            await client.aclose()

    versions, current = asyncio.run(run())
    assert current == 1 and 1 in versions  # the served version is never dropped
    # the KEEP newest, and the served one
    assert len(versions) == KEEP + 1 and max(versions) == KEEP + 6


def test_a_gateway_serves_the_promoted_version_and_follows_a_rollback(
    tmp_path: Path, fresh_redis: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = graded_lines()
    alpha = json.loads(lines[0])["prompt"]
    assert alpha.startswith("alpha")
    with OpenAIFake() as fake:
        config = write_config(tmp_path, fresh_redis.url, fake.base_url)
        server = {"providers": {"fake": openai_provider(fake.base_url)},
                  "store": {"kind": "redis", "redis_url": fresh_redis.url}}  # fmt: skip
        with GatewayProcess(server, gateway_policy()) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)

            def served() -> tuple[str, str]:
                raw = client.chat.completions.with_raw_response.create(
                    model="kept", messages=[{"role": "user", "content": alpha}], max_tokens=5
                )
                return raw.headers["x-gateway-model"], raw.headers["x-gateway-route"]

            # nothing promoted yet: no score, the fallback strategy (cheapest) serves
            model, route = served()
            assert model == "small" and "learned-unavailable" in route, route
            assert retrain(config, labels_file(tmp_path, "a.jsonl", lines)) == 0
            assert retrain(config, labels_file(tmp_path, "b.jsonl", flipped(lines))) == 0
            capsys.readouterr()
            # v2 (flipped: alpha prompts do not need the reference) is current
            assert _eventually(lambda: served()[0] == "small" and "learned-cheap" in served()[1])
            assert main(["route", "rollback", "kept", "--config", str(config)]) == 0
            # v1: alpha prompts are where the reference wins by far
            assert _eventually(lambda: served()[0] == "big"), served()
            route = served()[1]
            assert "learned-strong-score" in route, route


def _eventually(check: Any, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return False
