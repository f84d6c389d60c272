"""Refused and failed requests are visible to the operator: a 401, a 404 and a rate
limit's 429 appear in `GET /admin/refusals` and the console's refusals table with status,
code, tenant and key, route and reason; the ledger still holds only what was served."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

ADMIN_KEY = "gw-test-admin-refusals"
CLIENT_KEY = "gw-test-refusals-key"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    with OpenAIFake() as fake:
        config = {
            "server": {"admin_key_hash": key_hash(ADMIN_KEY)},
            "providers": {"fake": openai_provider(fake.base_url)},
        }
        policy = {
            "models": {
                "fast-model": {
                    "deployments": [{"provider": "fake", "upstream_model": "up-fast"}],
                    "prices": {"input": 1.0, "output": 2.0},
                }
            },
            "tenants": {
                "acme": {
                    "keys": [
                        {
                            "id": "one-a-minute",
                            "hash": key_hash(CLIENT_KEY),
                            "limits": {"requests_per_minute": 1},
                        }
                    ]
                }
            },
        }
        with GatewayProcess(config, policy) as process:
            yield process


def chat(gateway: GatewayProcess, key: str, model: str = "fast-model") -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": model, "messages": HELLO},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )


def test_refusals_appear_in_the_admin_view_and_the_console_but_not_in_spend(
    gateway: GatewayProcess,
) -> None:
    served = chat(gateway, CLIENT_KEY)
    limited = chat(gateway, CLIENT_KEY)
    unknown_model = chat(gateway, CLIENT_KEY, "no-such-model")
    wrong_key = chat(gateway, "gw-not-a-key")
    assert served.status_code == 200
    assert (limited.status_code, unknown_model.status_code, wrong_key.status_code) == (
        429,
        404,
        401,
    )
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}

    listed = httpx.get(gateway.url + "/admin/refusals", headers=admin, timeout=10)
    assert listed.status_code == 200
    by_id: dict[str, dict[str, Any]] = {r["request_id"]: r for r in listed.json()["data"]}
    rate_limited = by_id[limited.headers["x-request-id"]]
    assert rate_limited["status"] == 429
    assert rate_limited["code"] == limited.json()["error"]["code"]
    assert (rate_limited["tenant"], rate_limited["key_id"]) == ("acme", "one-a-minute")
    assert rate_limited["route"] == "fast-model"
    assert rate_limited["reason"] == limited.json()["error"]["message"]
    assert rate_limited["time"] > 0
    missing = by_id[unknown_model.headers["x-request-id"]]
    assert (missing["status"], missing["code"]) == (404, "model_not_found")
    assert missing["route"] == "no-such-model"
    stranger = by_id[wrong_key.headers["x-request-id"]]
    assert (stranger["status"], stranger["code"], stranger["tenant"]) == (
        401,
        "invalid_api_key",
        "",
    )
    # the served request is not a refusal
    assert served.headers["x-request-id"] not in by_id
    # newest first
    assert [r["request_id"] for r in listed.json()["data"][:3]] == [
        wrong_key.headers["x-request-id"],
        unknown_model.headers["x-request-id"],
        limited.headers["x-request-id"],
    ]
    # a client key cannot read it
    assert (
        httpx.get(
            gateway.url + "/admin/refusals",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        ).status_code
        == 403
    )

    with httpx.Client(base_url=gateway.url, timeout=10) as browser:
        assert browser.post("/console/login", data={"admin_key": ADMIN_KEY}).status_code == 303
        page = browser.get("/console").text
    table = page.split('id="recent-refusals"', 1)[1].split("</table>", 1)[0]
    assert limited.headers["x-request-id"] in table and "one-a-minute" in table
    assert unknown_model.headers["x-request-id"] in table and "model_not_found" in table

    # the access log has the refusal's line too, with who and why
    def access_line(request_id: str) -> dict[str, Any] | None:
        for line in gateway.log().splitlines():
            if line.startswith("{") and f'"request_id":"{request_id}"' in line:
                parsed: dict[str, Any] = json.loads(line)
                return parsed
        return None

    deadline = time.monotonic() + 5
    while (line := access_line(limited.headers["x-request-id"])) is None:
        assert time.monotonic() < deadline, "no access-log line for the refused request"
        time.sleep(0.05)
    assert (line["status"], line["error_code"]) == (429, rate_limited["code"])
    assert (line["tenant"], line["key_id"]) == ("acme", "one-a-minute")

    # the ledger stays exact: only the served request was billed
    spend = httpx.get(
        gateway.url + "/admin/spend", params={"group_by": "tenant"}, headers=admin, timeout=10
    ).json()
    assert [(row["group"], row["requests"]) for row in spend["rows"]] == [("acme", 1)]
