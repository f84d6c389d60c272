"""Policy edits on disk take effect without a restart; a broken edit does not."""

from __future__ import annotations

import copy
import signal
import time
from typing import Any

import httpx
import openai

from tests.api.conftest import CLIENT_KEY, policy_for
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, openai_provider

USER = [{"role": "user", "content": "hi"}]


def served_upstream_model(client: openai.OpenAI, fake: OpenAIFake, model: str) -> str:
    client.chat.completions.create(model=model, messages=USER)
    return str(fake.requests[-1].body["model"])


def reloads(gateway: GatewayProcess, result: str) -> float:
    text = httpx.get(gateway.url + "/metrics").text
    for line in text.splitlines():
        if line.startswith(f'gateway_policy_reloads_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def wait_until(predicate: Any, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_policy_edit_changes_routing_without_restart_and_broken_edit_is_refused() -> None:
    with OpenAIFake() as fake:
        policy = policy_for()
        config = {"providers": {"fake": openai_provider(fake.base_url)}}
        with GatewayProcess(config, policy) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
            assert served_upstream_model(client, fake, "fast-model") == "upstream-fast"

            edited = copy.deepcopy(policy)
            edited["models"]["fast-model"]["deployments"][0]["upstream_model"] = "upstream-v2"
            gateway.write_policy(edited)
            assert wait_until(lambda: reloads(gateway, "success") >= 1)
            assert served_upstream_model(client, fake, "fast-model") == "upstream-v2"

            broken = copy.deepcopy(edited)
            broken["models"]["fast-model"]["deployments"][0]["provider"] = "nowhere"
            gateway.write_policy(broken)
            assert wait_until(lambda: reloads(gateway, "failure") >= 1)
            assert served_upstream_model(client, fake, "fast-model") == "upstream-v2"
            # log lines reach the file from the log writer's thread, a moment later
            assert wait_until(lambda: "policy reload rejected" in gateway.log())
            assert "unknown provider 'nowhere'" in gateway.log()

            # SIGHUP reloads on demand too
            gateway.write_policy(policy)
            gateway.signal(signal.SIGHUP)
            assert wait_until(lambda: reloads(gateway, "success") >= 2)
            assert served_upstream_model(client, fake, "fast-model") == "upstream-fast"
