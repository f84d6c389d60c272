"""Evaluation jobs outlive the process that took them, and the daily cap holds with
several workers: real `gateway serve` processes on a real Redis, in front of the fake
OpenAI upstream (served, reference and judge models, as in test_evaluation_e2e.py), with
the official `openai` SDK as the client.

A gateway killed with SIGKILL while its reference call is held open leaves the job in
the journal; gateways started afterwards on the same Redis claim it once its lease runs
out, and the request is labelled exactly once. Four workers evaluating at once keep the
charged tenant's real evaluation spend within its daily cap."""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.e2e.support import ledger_records, server_config, store_config, wait_for
from tests.e2e.test_evaluation_e2e import (
    ACME_KEY,
    REFERENCE_ANSWER,
    ask,
    calls,
    evaluation_policy,
    feedback,
    judge_prefers_the_reference,
    labels_of,
    metric,
)
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash
from tests.support.redis_server import RedisServer

RACE_KEY = "gw-eval-race"
# opted in, never sampled: its requests are noted for feedback only
NOTED_KEY = "gw-eval-noted"
# what the race tenant may spend on evaluation per day: about two evaluations' real cost
RACE_CAP = Decimal("0.008")
JOURNAL = "gw{eval}:jobs"


class HeldOnce:
    """The reference holds its first answer to a `hold-until-kill` prompt for longer than
    the test takes to kill the gateway waiting for it, and answers at once afterwards;
    a `cap-race` prompt's reference answer takes half a second (so workers overlap)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        last = str(body["messages"][-1]["content"])
        if body.get("model") == "upstream-reference":
            if "hold-until-kill" in last:
                with self._lock:
                    first = last not in self._held
                    self._held.add(last)
                if first:
                    return Reply(words=REFERENCE_ANSWER.split(), delay=8.0)
            if "cap-race" in last:
                return Reply(words=REFERENCE_ANSWER.split(), delay=0.5)
        return judge_prefers_the_reference(body)


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(responder=HeldOnce()) as server:
        yield server


def policy() -> dict[str, Any]:
    shape = evaluation_policy()
    shape["tenants"]["race"] = {
        "keys": [{"id": "race", "hash": key_hash(RACE_KEY)}],
        # four reference tokens: a worst case of ~$0.004 per reference call
        "evaluation": {"daily_usd": float(RACE_CAP), "max_tokens": 4},
    }
    shape["tenants"]["noted"] = {
        "keys": [{"id": "noted", "hash": key_hash(NOTED_KEY)}],
        "evaluation": {"sample_rate": 0},
    }
    return shape


def config(fake: OpenAIFake, redis_server: RedisServer, workers: int) -> dict[str, Any]:
    store = store_config(redis_server.url, timeout_ms=2000, on_failure="fail_open")
    shape = server_config(fake.base_url, store)
    shape["server"]["log_content"] = True
    shape["evaluation"] = {"workers": workers, "journal_lease_seconds": 1.0}
    return shape


def journal_state(redis_server: RedisServer) -> tuple[int, int]:
    """(entries in the journal, entries handed out and not acknowledged)."""
    connection = redis.Redis.from_url(redis_server.url)
    try:
        if not connection.exists(JOURNAL):
            return 0, 0
        pending: Any = connection.xpending(JOURNAL, "evaluators")
        return int(connection.xlen(JOURNAL)), int(pending["pending"])
    finally:
        connection.close()


def test_a_job_of_a_gateway_killed_mid_evaluation_is_labelled_once_by_its_successors(
    fake: OpenAIFake, fresh_redis: RedisServer
) -> None:
    marker = f"hold-until-kill {uuid.uuid4().hex}"
    killed = GatewayProcess(config(fake, fresh_redis, workers=1), policy()).start()
    try:
        request_id = ask(killed, marker)[1]["x-request-id"]
        # the reference call is under way, held open by the fake
        assert wait_for(lambda: calls(fake, "upstream-reference", marker) == 1, timeout=20)
        assert journal_state(fresh_redis) == (1, 1)
        killed.signal(signal.SIGKILL)
    finally:
        killed.stop()
    assert labels_of(fresh_redis, request_id) == []

    # two successors on the same Redis race for the one job
    successors = [GatewayProcess(config(fake, fresh_redis, workers=1), policy()) for _ in range(2)]
    try:
        for successor in successors:
            successor.start()
        assert wait_for(lambda: bool(labels_of(fresh_redis, request_id)), timeout=30)
        assert wait_for(lambda: journal_state(fresh_redis) == (0, 0), timeout=10)
        (label,) = labels_of(fresh_redis, request_id)
        assert label.verdicts == ("A", "B") and label.prompt == marker
        # claimed by exactly one of them, and run once more in all
        assert sum(metric(s, "gateway_evaluation_reclaimed_total") for s in successors) == 1
        assert calls(fake, "upstream-reference", marker) == 2
        assert calls(fake, "upstream-judge", marker) == 2
    finally:
        for successor in successors:
            successor.stop()
    assert len(labels_of(fresh_redis, request_id)) == 1


def test_the_journal_is_emptied_as_jobs_finish(fake: OpenAIFake, fresh_redis: RedisServer) -> None:
    with GatewayProcess(config(fake, fresh_redis, workers=2), policy()) as gateway:
        marker = f"journal {uuid.uuid4().hex}"
        ids = [ask(gateway, f"{marker} {n}")[1]["x-request-id"] for n in range(6)]
        assert wait_for(lambda: all(labels_of(fresh_redis, i) for i in ids), timeout=30)
        assert wait_for(lambda: journal_state(fresh_redis) == (0, 0), timeout=10)
        connection = redis.Redis.from_url(fresh_redis.url)
        try:
            ttl = int(connection.ttl(JOURNAL))  # type: ignore[arg-type]
        finally:
            connection.close()
        assert 0 < ttl <= 86_400
        assert metric(gateway, "gateway_evaluation_reclaimed_total") == 0


def test_the_daily_cap_holds_with_four_workers_evaluating_at_once(
    fake: OpenAIFake, fresh_redis: RedisServer
) -> None:
    marker = f"cap-race {uuid.uuid4().hex}"
    with GatewayProcess(config(fake, fresh_redis, workers=4), policy()) as gateway:
        capped = 'gateway_evaluation_dropped_total{reason="daily_cap"}'
        for n in range(8):
            ask(gateway, f"{marker} {n}", key=RACE_KEY)
        # every job ends: labelled, or stopped by the cap
        assert wait_for(lambda: journal_state(fresh_redis) == (0, 0), timeout=30)
        assert metric(gateway, capped) >= 1
        assert calls(fake, "upstream-reference", marker) >= 1

    spent = sum(
        (Decimal(r.cost_usd) for r in ledger_records(fresh_redis.url) if r.kind == "evaluation"),
        Decimal(0),
    )
    assert Decimal(0) < spent <= RACE_CAP
    # the day's counter holds the settled real costs, no reservation left over
    connection = redis.Redis.from_url(fresh_redis.url)
    try:
        (key,) = connection.keys("gw{eval}:spend:race:*")
        counted = Decimal(int(connection.get(key))) / Decimal(10**9)  # type: ignore[arg-type]
    finally:
        connection.close()
    assert abs(counted - spent) < Decimal("0.000001")


def test_feedback_sent_at_once_to_another_replica_finds_the_request(
    fake: OpenAIFake, fresh_redis: RedisServer
) -> None:
    replicas = [GatewayProcess(config(fake, fresh_redis, workers=1), policy()) for _ in range(2)]
    try:
        for replica in replicas:
            replica.start()
        answering, told = replicas
        found = {ACME_KEY: 0, NOTED_KEY: 0}
        with httpx.Client(base_url=told.url, timeout=10) as application:
            for key in found:  # sampled (journalled), and noted only
                sdk = openai.OpenAI(base_url=answering.base_url, api_key=key, max_retries=0)
                for n in range(10):
                    # back to back: the later answers' notes wait for the batch after the first
                    raw = sdk.chat.completions.with_raw_response.create(
                        model="evaluated", messages=[{"role": "user", "content": f"at once {n}"}]
                    )
                    sent = application.post(
                        "/v1/feedback",
                        json={
                            "request_id": raw.headers["x-request-id"],
                            "metric": "thumbs_up",
                            "value": True,
                        },
                        headers={"authorization": f"Bearer {key}"},
                    )
                    assert sent.status_code == 200, (key, n, sent.text)
                    found[key] += 1
        assert found == {ACME_KEY: 10, NOTED_KEY: 10}
        # a request nobody made is still not found (after the wait for a late note)
        missing = feedback(told, {"request_id": "never-made", "metric": "thumbs_up", "value": True})
        assert missing.status_code == 404
    finally:
        for replica in replicas:
            replica.stop()
