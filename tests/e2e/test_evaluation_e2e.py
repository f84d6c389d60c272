"""Online evaluation through a real `gateway serve` on a real Redis, in front of the fake
OpenAI upstream playing three models (the served one echoes, the reference answers
"reference answer", the judge prefers the reference in either order), judged by the
official `openai` SDK: sampled requests get one label each (also when the same request id
comes again, and across a restart), the client's bytes do not change, the daily cap stops
the spend, outages of the reference or the judge never reach the client, and
`POST /v1/feedback` takes good input and refuses bad in OpenAI's error shape."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis

from gateway.evaluation.labels import Label, decode_label
from gateway.training.labelled import read_files
from tests.e2e.support import ADMIN_KEY, ledger_records, server_config, store_config, wait_for
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import REPO, GatewayProcess, key_hash
from tests.support.redis_server import RedisServer

ACME_KEY = "gw-eval-acme"
PLAIN_KEY = "gw-eval-plain"
CAPPED_KEY = "gw-eval-capped"
REFERENCE_ANSWER = "reference answer"


def judge_prefers_the_reference(body: dict[str, Any]) -> Reply | None:
    """The fake's three roles, told apart by the upstream model asked for."""
    model = body.get("model")
    last = str(body["messages"][-1]["content"])
    if model == "upstream-reference":
        if "reference-outage" in last:
            return Reply.error(503, "reference is down")
        if "slow-reference" in last:
            return Reply(words=REFERENCE_ANSWER.split(), delay=6.0)
        return Reply(words=REFERENCE_ANSWER.split())
    if model == "upstream-judge":
        if "judge-outage" in last:
            return Reply.error(503, "judge is down")
        shown_first = last.split("[Assistant A's answer]\n", 1)[1]
        winner = "A" if shown_first.startswith(REFERENCE_ANSWER) else "B"
        return Reply(words=["The", "reference", "is", "better.", f"[[{winner}]]"])
    return None  # the served model echoes the prompt


def evaluation_policy() -> dict[str, Any]:
    def priced(upstream: str, output: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": 1, "output": output},
        }

    return {
        "models": {
            "chat-model": priced("upstream-chat", 2),
            # $1,000 per million output tokens: one reference answer costs ~ $0.002
            "reference-model": priced("upstream-reference", 1000),
            "judge-model": priced("upstream-judge", 2),
        },
        "routes": {
            "evaluated": {
                "models": ["chat-model"],
                "evaluation": {
                    "sample_rate": 1.0,
                    "reference": "reference-model",
                    "judge": "judge-model",
                    "daily_usd": 100,
                },
            },
        },
        "tenants": {
            "acme": {"keys": [{"id": "acme", "hash": key_hash(ACME_KEY)}], "evaluation": {}},
            "plain": {"keys": [{"id": "plain", "hash": key_hash(PLAIN_KEY)}]},
            # below one reference answer's worst case: no evaluation call fits
            "capped": {
                "keys": [{"id": "capped", "hash": key_hash(CAPPED_KEY)}],
                "evaluation": {"daily_usd": 0.000001},
            },
        },
        "feedback_metrics": {
            "thumbs_up": {"type": "boolean"},
            "rating": {"type": "float", "min": 1, "max": 5},
        },
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(responder=judge_prefers_the_reference) as server:
        yield server


@pytest.fixture(scope="module")
def redis_for_eval() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(fake: OpenAIFake, redis_for_eval: RedisServer) -> Iterator[GatewayProcess]:
    store = store_config(redis_for_eval.url, timeout_ms=2000, on_failure="fail_open")
    config = server_config(fake.base_url, store)
    # prompts are kept with their labels (for `route labels export`) only with this
    config["server"]["log_content"] = True
    with GatewayProcess(config, evaluation_policy()) as process:
        yield process


def client(gateway: GatewayProcess, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


def fresh(text: str = "question") -> str:
    return f"{text} {uuid.uuid4().hex}"


def ask(
    gateway: GatewayProcess,
    prompt: str,
    *,
    key: str = ACME_KEY,
    stream: bool = False,
    request_id: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The answer's raw bytes (a stream read to its end) and its headers."""
    headers = {"x-request-id": request_id} if request_id else None
    completions = client(gateway, key).chat.completions
    messages: Any = [{"role": "user", "content": prompt}]
    if stream:
        with completions.with_streaming_response.create(
            model="evaluated", messages=messages, stream=True, extra_headers=headers
        ) as streamed:
            return streamed.read(), dict(streamed.headers)
    raw = completions.with_raw_response.create(
        model="evaluated", messages=messages, extra_headers=headers
    )
    raw.parse()
    return raw.http_response.content, dict(raw.headers)


def stored_labels(redis_server: RedisServer) -> list[Label]:
    connection = redis.Redis.from_url(redis_server.url)
    try:
        entries: Any = connection.xrange("gw{eval}:labels", "-", "+")
    finally:
        connection.close()
    return [decode_label(fields[b"label"]) for _, fields in entries]


def labels_of(redis_server: RedisServer, request_id: str) -> list[Label]:
    return [label for label in stored_labels(redis_server) if label.request_id == request_id]


def calls(fake: OpenAIFake, upstream: str, marker: str) -> int:
    return sum(
        1
        for received in list(fake.requests)
        if received.body.get("model") == upstream and marker in json.dumps(received.body)
    )


def metric(gateway: GatewayProcess, name: str) -> float:
    total = 0.0
    for line in httpx.get(gateway.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sampled_requests_are_judged_once_each_and_the_labels_export_for_route_train(
    gateway: GatewayProcess, fake: OpenAIFake, redis_for_eval: RedisServer, tmp_path: Path
) -> None:
    marker = fresh("labelled")
    ids = [
        ask(gateway, f"{marker} one")[1]["x-request-id"],
        ask(gateway, f"{marker} two", stream=True)[1]["x-request-id"],
    ]

    assert wait_for(lambda: all(labels_of(redis_for_eval, i) for i in ids), timeout=20)
    for request_id in ids:
        (label,) = labels_of(redis_for_eval, request_id)
        # the judge preferred the reference in both orders: shown first (A), then second (B)
        assert label.verdicts == ("A", "B")
        assert (label.served_quality, label.reference_quality) == (0.0, 1.0)
        assert (label.tenant, label.route, label.served_model) == (
            "acme",
            "evaluated",
            "chat-model",
        )
        assert label.reference_model == "reference-model" and label.judge_model == "judge-model"
        assert label.prompt.startswith(marker) and label.kind in ("chat", "other")
        assert float(label.evaluation_cost_usd) > 0
    # one reference answer and two judge calls per evaluated request
    assert calls(fake, "upstream-reference", marker) == 2
    assert calls(fake, "upstream-judge", marker) == 4

    def evaluation_records() -> list[Any]:
        return [r for r in ledger_records(redis_for_eval.url) if r.kind == "evaluation"]

    assert wait_for(lambda: len(evaluation_records()) >= 6)
    records = evaluation_records()
    assert {r.tenant for r in records} == {"acme"} and {r.key_id for r in records} == {"evaluation"}
    assert {"reference-model", "judge-model"} <= {r.model for r in records}

    out = tmp_path / "labels.jsonl"
    exported = cli(
        "route", "labels", "export", "--config", str(gateway.config_path), "--out", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    mine = [line for line in lines if line["id"] in ids]
    assert len(mine) == 2
    assert all(line["strong_quality"] == 1.0 and line["weak_quality"] == 0.0 for line in mine)
    assert all(line["reference_model"] == "reference-model" for line in mine)
    assert {line["served_model"] for line in mine} == {"chat-model"}
    # the format `route train` reads, extra keys and all
    rows = {row.id: row for row in read_files([out])}
    assert rows[ids[0]].strong == 1.0 and rows[ids[0]].weak == 0.0

    shown = cli("route", "quality", "--config", str(gateway.config_path), "--json")
    assert shown.returncode == 0, shown.stderr
    quality = json.loads(shown.stdout)["quality"]
    whole = next(r for r in quality if r["route"] == "evaluated" and r["model"] == "all")
    # every judged answer lost to the reference: measured quality 0
    assert (
        whole["ratio"] == 0.0 and whole["samples"] >= 2 and whole["reference"] == "reference-model"
    )
    text = cli("route", "quality", "--config", str(gateway.config_path))
    assert "saved $" in text.stdout and "against always-reference-model" in text.stdout


def test_the_same_request_id_is_labelled_once_also_after_a_restart(
    gateway: GatewayProcess, fake: OpenAIFake, redis_for_eval: RedisServer
) -> None:
    marker = fresh("repeated")
    request_id = f"client-{uuid.uuid4().hex}"
    _, headers = ask(gateway, marker, request_id=request_id)
    assert headers["x-request-id"] == request_id
    assert wait_for(lambda: bool(labels_of(redis_for_eval, request_id)), timeout=20)
    dropped_before = metric(gateway, 'gateway_evaluation_dropped_total{reason="already_labelled"}')
    ask(gateway, marker, request_id=request_id)
    assert wait_for(
        lambda: (
            metric(gateway, 'gateway_evaluation_dropped_total{reason="already_labelled"}')
            > dropped_before
        )
    )

    gateway.stop()
    gateway.start()
    ask(gateway, marker, request_id=request_id)
    assert wait_for(
        lambda: metric(gateway, 'gateway_evaluation_dropped_total{reason="already_labelled"}') >= 1
    )

    assert len(labels_of(redis_for_eval, request_id)) == 1
    # a labelled request is not evaluated again: one reference call in all
    assert calls(fake, "upstream-reference", marker) == 1


def test_the_clients_bytes_are_the_same_with_evaluation_on(
    gateway: GatewayProcess, redis_for_eval: RedisServer
) -> None:
    for stream in (False, True):
        prompt = fresh("bytes")
        evaluated, evaluated_headers = ask(gateway, prompt, stream=stream)
        plain, _ = ask(gateway, prompt, key=PLAIN_KEY, stream=stream)
        ours = evaluated_headers["x-request-id"]
        assert wait_for(lambda ours=ours: bool(labels_of(redis_for_eval, ours)), timeout=20)
        # byte for byte, but for the answer's id where the gateway makes one per request
        assert evaluated.replace(_id_in(evaluated, stream), b"ID") == plain.replace(
            _id_in(plain, stream), b"ID"
        )
        assert answer_text(evaluated, stream) == f"echo: {prompt}"


def answer_text(body: bytes, stream: bool) -> str:
    """What the client reads: the message, or a stream's deltas joined."""
    if not stream:
        return str(json.loads(body)["choices"][0]["message"]["content"])
    pieces = []
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                pieces.append(choice["delta"].get("content") or "")
    return "".join(pieces)


def _id_in(body: bytes, stream: bool) -> bytes:
    text = body.decode()
    if stream:
        text = text.split("data: ", 1)[1].split("\n", 1)[0]
    return str(json.loads(text)["id"]).encode()


def test_the_daily_cap_stops_evaluation_spend(
    gateway: GatewayProcess, fake: OpenAIFake, redis_for_eval: RedisServer
) -> None:
    marker = fresh("capped")
    capped = 'gateway_evaluation_dropped_total{reason="daily_cap"}'
    before = metric(gateway, capped)
    first = ask(gateway, f"{marker} 1", key=CAPPED_KEY)[1]["x-request-id"]
    # the reference answer's worst case alone does not fit the cap: no call is made
    assert wait_for(lambda: metric(gateway, capped) >= before + 1, timeout=20)
    later = [ask(gateway, f"{marker} {n}", key=CAPPED_KEY)[1]["x-request-id"] for n in (2, 3)]
    assert wait_for(lambda: metric(gateway, capped) >= before + 3, timeout=20)

    assert calls(fake, "upstream-reference", marker) == 0
    assert calls(fake, "upstream-judge", marker) == 0
    assert not any(labels_of(redis_for_eval, i) for i in [first, *later])


@pytest.mark.parametrize("outage", ["reference-outage", "judge-outage"])
def test_an_outage_of_the_reference_or_the_judge_never_reaches_the_client(
    gateway: GatewayProcess, redis_for_eval: RedisServer, outage: str
) -> None:
    reason = outage.replace("-outage", "_error")
    dropped = f'gateway_evaluation_dropped_total{{reason="{reason}"}}'
    before = metric(gateway, dropped)
    prompt = fresh(outage)
    answers = [ask(gateway, prompt, stream=stream) for stream in (False, True)]

    for (body, headers), stream in zip(answers, (False, True), strict=True):
        assert answer_text(body, stream) == f"echo: {prompt}"
        assert headers["x-gateway-model"] == "chat-model"
    assert wait_for(lambda: metric(gateway, dropped) >= before + 2, timeout=30)
    assert not any(labels_of(redis_for_eval, h["x-request-id"]) for _, h in answers)
    # and the next client is served as ever
    assert answer_text(ask(gateway, prompt)[0], False) == f"echo: {prompt}"


def feedback(gateway: GatewayProcess, body: Any, key: str = ACME_KEY) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/feedback",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )


def test_feedback_stores_a_declared_metric_once(
    gateway: GatewayProcess, redis_for_eval: RedisServer, tmp_path: Path
) -> None:
    request_id = ask(gateway, fresh("feedback"))[1]["x-request-id"]
    good = feedback(gateway, {"request_id": request_id, "metric": "thumbs_up", "value": True})
    assert good.status_code == 200, good.text
    assert good.json()["value"] == 1.0
    rated = feedback(gateway, {"request_id": request_id, "metric": "rating", "value": 4})
    assert rated.status_code == 200 and rated.json()["value"] == 0.75

    again = feedback(gateway, {"request_id": request_id, "metric": "thumbs_up", "value": False})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "label_exists"

    stored = {label.metric: label for label in labels_of(redis_for_eval, request_id)}
    assert stored["thumbs_up"].served_quality == 1.0 and stored["thumbs_up"].source == "feedback"
    assert stored["rating"].served_quality == 0.75
    assert stored["thumbs_up"].served_model == "chat-model"

    out = tmp_path / "thumbs.jsonl"
    exported = cli(
        "route", "labels", "export", "--config", str(gateway.config_path), "--out", str(out),
        "--metric", "thumbs_up",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert any(line["id"] == request_id and line["weak_quality"] == 1.0 for line in lines)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"metric": "thumbs_up", "value": True}, "request_id"),
        ({"request_id": "R", "metric": "stars", "value": 3}, "metric"),
        ({"request_id": "R", "value": True}, "metric"),
        ({"request_id": "R", "metric": "thumbs_up", "value": "yes"}, "value"),
        ({"request_id": "R", "metric": "thumbs_up"}, "value"),
        ({"request_id": "R", "metric": "rating", "value": 9}, "value"),
        ({"request_id": "R", "metric": "rating", "value": True}, "value"),
    ],
)
def test_bad_feedback_is_refused_naming_the_param(
    gateway: GatewayProcess, body: dict[str, Any], param: str
) -> None:
    request_id = ask(gateway, fresh("bad feedback"))[1]["x-request-id"]
    if body.get("request_id") == "R":
        body = {**body, "request_id": request_id}
    refused = feedback(gateway, body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"]


def test_feedback_on_a_request_the_tenant_did_not_make_is_not_found(
    gateway: GatewayProcess,
) -> None:
    theirs = ask(gateway, fresh("not yours"), key=CAPPED_KEY)[1]["x-request-id"]
    for request_id in (theirs, f"never-{uuid.uuid4().hex}"):
        missing = feedback(
            gateway, {"request_id": request_id, "metric": "thumbs_up", "value": True}
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["param"] == "request_id"
    unauthenticated = feedback(gateway, {"request_id": theirs, "metric": "thumbs_up"}, key="nope")
    assert unauthenticated.status_code == 401
    not_json = httpx.post(
        gateway.url + "/v1/feedback",
        content=b"{not json",
        headers={"authorization": f"Bearer {ACME_KEY}"},
        timeout=10,
    )
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_json"


def test_the_console_quality_page_leads_with_the_saving_at_measured_quality(
    gateway: GatewayProcess, redis_for_eval: RedisServer
) -> None:
    request_id = ask(gateway, fresh("console"))[1]["x-request-id"]
    assert wait_for(lambda: bool(labels_of(redis_for_eval, request_id)), timeout=20)
    with httpx.Client(base_url=gateway.url, timeout=10) as browser:
        login = browser.post(
            "/console/login", data={"admin_key": ADMIN_KEY}, headers={"origin": gateway.url}
        )
        assert login.status_code == 303
        page = browser.get("/console/quality")
    assert page.status_code == 200
    section = page.text.split('id="route-evaluated"', 1)[1]
    headline = section.split('<p class="headline"><b>', 1)[1].split("</b>", 1)[0]
    assert headline.startswith("saved $")
    assert "against always-reference-model at measured quality 0% [0%, " in headline
    assert "chat-model" in section


@pytest.fixture(scope="module")
def small_queue_gateway(fake: OpenAIFake, redis_for_eval: RedisServer) -> Iterator[GatewayProcess]:
    """One evaluation at a time and one waiting: the rest must be dropped, not queued."""
    store = store_config(redis_for_eval.url, timeout_ms=2000, on_failure="fail_open")
    config = {**server_config(fake.base_url, store), "evaluation": {"queue_size": 1, "workers": 1}}
    with GatewayProcess(config, evaluation_policy()) as process:
        yield process


def test_a_full_queue_drops_evaluations_and_counts_them_while_clients_are_served(
    small_queue_gateway: GatewayProcess,
) -> None:
    full = 'gateway_evaluation_dropped_total{reason="queue_full"}'
    prompt = fresh("slow-reference")
    started = time.monotonic()
    answers = [ask(small_queue_gateway, f"{prompt} {n}") for n in range(5)]
    elapsed = time.monotonic() - started

    assert [answer_text(body, False) for body, _ in answers] == [
        f"echo: {prompt} {n}" for n in range(5)
    ]
    # the clients did not wait for the 6-second reference answers
    assert elapsed < 6.0
    # one evaluating, one waiting, three dropped
    assert wait_for(lambda: metric(small_queue_gateway, full) >= 3)
    assert metric(small_queue_gateway, "gateway_evaluation_enqueued_total") == 2
