"""Shadow evaluation through a real `gateway serve` on a real Redis, in front of the fake
OpenAI upstream playing three models (the reference answers "reference answer", the
cheap model "cheap answer", the judge either ties or prefers the reference), with the
official `openai` SDK: a `measured` route with nothing measured serves its reference and
says `unmeasured`; each sampled request is also answered by the cheap model off the
client's time and judged against the reference's real answer (labels marked `shadow`);
once measured quality is refreshed, a cheap model that keeps the target takes the kind,
and one the judge finds worse leaves the route on its reference."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.evaluation.labels import Label
from tests.e2e.support import ledger_records, server_config, store_config, wait_for
from tests.e2e.test_evaluation_e2e import cli, metric, stored_labels
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash
from tests.support.redis_server import RedisServer

KEY = "gw-shadow-acme"
REFERENCE_ANSWER = "reference answer"
CHEAP_ANSWER = "cheap answer"
# a question carrying this makes the judge prefer the reference; otherwise it ties
STRICT = "strictly judged"
# a question carrying this finds the cheap model down
OUTAGE = "cheap outage"


def responder(body: dict[str, Any]) -> Reply | None:
    """The fake's three roles, told apart by the upstream model asked for."""
    model = body.get("model")
    if model == "big-up":
        return Reply(words=REFERENCE_ANSWER.split())
    if model == "small-up":
        if OUTAGE in str(body["messages"][-1]["content"]):
            return Reply.error(503, "the cheap model is down")
        return Reply(words=CHEAP_ANSWER.split())
    if model == "judge-up":
        prompt = str(body["messages"][-1]["content"])
        if STRICT not in prompt:
            return Reply(words=["Equally", "good.", "[[C]]"])
        shown_first = prompt.split("[Assistant A's answer]\n", 1)[1]
        winner = "A" if shown_first.startswith(REFERENCE_ANSWER) else "B"
        return Reply(words=["The", "reference", "is", "better.", f"[[{winner}]]"])
    return None


def policy() -> dict[str, Any]:
    def priced(upstream: str, price: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": price, "output": price},
        }

    def kept() -> dict[str, Any]:
        return {
            "strategy": "measured",
            "models": ["small", "big"],
            "reference": "big",
            "quality_target": 0.9,
            "evaluation": {
                "sample_rate": 1.0,
                "reference": "big",
                "judge": "judge",
                "daily_usd": 100,
            },
        }

    return {
        "models": {
            "big": priced("big-up", 8),
            "small": priced("small-up", 0.4),
            "judge": priced("judge-up", 1),
        },
        # routes alike: measured quality is kept per route, so each test has its own
        "routes": {"kept": kept(), "strict": kept(), "outage": kept()},
        "tenants": {"acme": {"keys": [{"id": "acme", "hash": key_hash(KEY)}], "evaluation": {}}},
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(responder=responder) as server:
        yield server


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(fake: OpenAIFake, redis_server: RedisServer) -> Iterator[GatewayProcess]:
    store = store_config(redis_server.url, timeout_ms=2000, on_failure="fail_open")
    config = server_config(fake.base_url, store)
    config["server"]["log_content"] = True
    # measured quality reaches routing within a second of a new label
    config["evaluation"] = {"refresh_seconds": 1}
    with GatewayProcess(config, policy()) as process:
        yield process


def ask(gateway: GatewayProcess, route: str, prompt: str) -> tuple[str, dict[str, str]]:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(
        model=route, messages=[{"role": "user", "content": prompt}]
    )
    return raw.parse().choices[0].message.content or "", dict(raw.headers)


def shadow_labels(redis_server: RedisServer, route: str) -> list[Label]:
    return [
        label
        for label in stored_labels(redis_server)
        if label.route == route and label.shadow and label.kind == "chat"
    ]


def question(text: str = "") -> str:
    return f"hello there {text} ({uuid.uuid4().hex[:6]})"


def test_a_measured_route_measures_its_cheap_model_in_the_shadow_and_then_routes_to_it(
    gateway: GatewayProcess, fake: OpenAIFake, redis_server: RedisServer, tmp_path: Path
) -> None:
    first = [ask(gateway, "kept", question()) for _ in range(3)]
    for answer, headers in first:
        # the client gets the reference's answer, never the shadow's
        assert answer == REFERENCE_ANSWER and headers["x-gateway-model"] == "big"
        assert "reason=measured-chat-unmeasured-reference" in headers["x-gateway-route"]
    ids = {headers["x-request-id"] for _, headers in first}

    def shadowed() -> set[str]:
        return {label.request_id for label in shadow_labels(redis_server, "kept")}

    assert wait_for(lambda: ids <= shadowed(), 20)
    for label in shadow_labels(redis_server, "kept"):
        if label.request_id not in ids:
            continue
        # the cheap model answered in the shadow and tied with the reference's real answer
        assert (label.served_model, label.reference_model) == ("small", "big")
        assert (label.served_quality, label.reference_quality) == (0.5, 0.5)
        assert label.verdicts == ("C", "C")
        assert float(label.served_cost_usd) > 0 and float(label.evaluation_cost_usd) > 0
        assert float(label.served_cost_usd) < float(label.reference_cost_usd)
    # one shadow call to the cheap model per reference-served request, none to the client
    cheap_calls = [r for r in list(fake.requests) if r.body.get("model") == "small-up"]
    assert len(cheap_calls) >= 3
    assert wait_for(
        lambda: (
            {"small", "judge"}
            <= {r.model for r in ledger_records(redis_server.url) if r.kind == "evaluation"}
        )
    )

    # within a refresh (1 s here) the measured tie clears the 0.9 target at its lower bound
    served: dict[str, str] = {}

    def routed_to_small() -> bool:
        _, headers = ask(gateway, "kept", question())
        served.update(headers)
        return headers["x-gateway-model"] == "small"

    assert wait_for(routed_to_small, timeout=15, step=0.3), served
    assert served["x-gateway-route"].startswith(
        "kept; served=small; reason=measured-chat-small-low-"
    ), served["x-gateway-route"]

    out = tmp_path / "labels.jsonl"
    exported = cli(
        "route", "labels", "export", "--config", str(gateway.config_path), "--out", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    mine = [line for line in lines if line["id"] in ids]
    assert len(mine) == 3
    assert all(line["shadow"] is True and line["served_model"] == "small" for line in mine)


def test_a_cheap_model_the_judge_finds_worse_keeps_the_route_on_its_reference(
    gateway: GatewayProcess, redis_server: RedisServer
) -> None:
    for _ in range(3):
        answer, headers = ask(gateway, "strict", question(STRICT))
        assert answer == REFERENCE_ANSWER and headers["x-gateway-model"] == "big"
    assert wait_for(lambda: len(shadow_labels(redis_server, "strict")) >= 3, 20)
    labels = shadow_labels(redis_server, "strict")
    assert all(lb.served_model == "small" for lb in labels)
    assert all((lb.served_quality, lb.reference_quality) == (0.0, 1.0) for lb in labels)

    def below_target() -> bool:
        _, headers = ask(gateway, "strict", question(STRICT))
        assert headers["x-gateway-model"] == "big", headers
        return "reason=measured-chat-below-target-reference" in headers["x-gateway-route"]

    # measured (after a refresh) and below the target: the reference keeps serving
    assert wait_for(below_target, timeout=15, step=0.3)


def test_an_outage_of_the_shadow_candidate_never_reaches_the_client(
    gateway: GatewayProcess, redis_server: RedisServer
) -> None:
    before = metric(gateway, 'gateway_evaluation_dropped_total{reason="shadow_error"}')
    for _ in range(2):
        answer, headers = ask(gateway, "outage", question(OUTAGE))
        assert answer == REFERENCE_ANSWER and headers["x-gateway-model"] == "big"
    # each shadow call failed: dropped and counted, no label
    assert wait_for(
        lambda: (
            metric(gateway, 'gateway_evaluation_dropped_total{reason="shadow_error"}') >= before + 2
        ),
        timeout=20,
    )
    assert not [label for label in stored_labels(redis_server) if label.route == "outage"]
