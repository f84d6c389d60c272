"""The plan stage picks the same way for the same request id on every process: a retried
request (same `x-request-id`) on another worker or replica lands on the same model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from gateway.pipeline.flow import Flow
from gateway.pipeline.plan import plan_request
from gateway.pipeline.policy_view import PolicyView
from gateway.routing.measured import MeasuredQuality
from gateway.routing.state import LiveStats, TenantState
from gateway.settings import load_settings
from gateway.wire.openai import ChatRequest
from tests.pipeline.support import KEY, write_config
from tests.support.gateway_process import REPO, key_hash

PICK = """
import asyncio, json, sys
import msgspec
from gateway.pipeline.flow import Flow
from gateway.pipeline.plan import plan_request
from gateway.pipeline.policy_view import PolicyView
from gateway.routing.state import LiveStats, TenantState
from gateway.settings import load_settings
from gateway.wire.openai import ChatRequest

settings = load_settings(sys.argv[1], env={"FAKE_UPSTREAM_KEY": "sk-x-0123456789"})
view = PolicyView.build(settings.policy)
picks = []
for n in range(64):
    flow = Flow(request_id=f"retry-{n}", started=0.0, created=0, view=view)
    flow.caller = view.keys.authenticate(sys.argv[2])
    body = {"model": "split", "messages": [{"role": "user", "content": "hi"}]}
    flow.request = msgspec.convert(body, ChatRequest)
    asyncio.run(plan_request(flow, {}, TenantState(), LiveStats()))
    picks.append(flow.candidates[0].model)
print(json.dumps(picks))
"""


def policy() -> dict[str, object]:
    def model(name: str) -> dict[str, object]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": name}],
            "prices": {"input": 1.0, "output": 1.0},
        }

    return {
        "models": {"a": model("a"), "b": model("b")},
        "routes": {"split": {"strategy": "weighted", "models": ["a", "b"], "weights": [1, 1]}},
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


def picks_in_a_process(config: Path, hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-c", PICK, str(config), KEY],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def test_weighted_choices_do_not_depend_on_the_process(tmp_path: Path) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", policy())
    first = picks_in_a_process(config, "1")
    second = picks_in_a_process(config, "2")
    assert first == second
    # and the split is a real one: both models are picked across request ids
    assert set(first) == {"a", "b"}


def test_the_kind_classifier_and_measured_quality_reach_a_quality_target_route(
    tmp_path: Path,
) -> None:
    """The seam the runtime fills: `plan_request(..., request_kind=...)` classifies the
    last user message for routes with a quality target, and `LiveStats.measured_quality`
    carries what evaluation measured."""
    kept = {"strategy": "measured", "models": ["a", "b"], "reference": "b", "quality_target": 0.9}
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", {**policy(), "routes": {"kept": kept}})
    settings = load_settings(config, env={"FAKE_UPSTREAM_KEY": "sk-x-0123456789"})
    view = PolicyView.build(settings.policy)
    seen: list[str] = []

    def kind(text: str) -> str:
        seen.append(text)
        return "code" if "def " in text else "chat"

    live = LiveStats(
        measured_quality={
            ("kept", "a", "code"): MeasuredQuality("kept", "a", "code", 0.97, 0.93, 0.99, 150)
        }
    )

    def plan_one(text: str) -> Flow:
        flow = Flow(request_id="r", started=0.0, created=0, view=view)
        flow.caller = view.keys.authenticate(KEY)
        body = {"model": "kept", "messages": [{"role": "user", "content": text}]}
        flow.request = msgspec.convert(body, ChatRequest)
        asyncio.run(plan_request(flow, {}, TenantState(), live, request_kind=kind))
        return flow

    code, chat = plan_one("def f(): pass"), plan_one("hello there")
    assert seen == ["def f(): pass", "hello there"]
    assert code.candidates[0].model == "a" and code.quality_status == "measured"
    assert code.route_reason == "measured-code-a-low-0.930"
    assert chat.candidates[0].model == "b" and chat.quality_status == "unmeasured"
    assert chat.route_reason == "measured-chat-unmeasured-reference"
