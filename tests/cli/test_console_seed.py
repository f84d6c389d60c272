"""`make dev` seeds the console: a demo tenant and key made through the admin API and a
few requests through the gateway, which the console then shows."""

from __future__ import annotations

import httpx

from gateway.cli.console_seed import DEMO_KEY_ID, DEMO_TENANT, seed
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

ADMIN_KEY = "gw-seed-admin"
CLIENT_KEY = "gw-seed-client"


def test_the_seed_leaves_spend_keys_and_requests_for_the_console() -> None:
    with OpenAIFake() as fake:
        config = {
            "server": {"admin_key_hash": key_hash(ADMIN_KEY)},
            "providers": {"fake": openai_provider(fake.base_url)},
        }
        policy = {
            "models": {
                "m": {
                    "deployments": [{"provider": "fake", "upstream_model": "u"}],
                    "prices": {"input": 1, "output": 2},
                }
            },
            "routes": {"auto": {"models": ["m"]}},
            "tenants": {"dev": {"keys": [{"id": "dev-key", "hash": key_hash(CLIENT_KEY)}]}},
        }
        with GatewayProcess(config, policy) as gateway:
            assert seed(gateway.url, ADMIN_KEY, CLIENT_KEY, wait_seconds=10)
            spend = httpx.get(
                gateway.url + "/admin/spend",
                params={"group_by": "tenant"},
                headers={"authorization": f"Bearer {ADMIN_KEY}"},
            ).json()
            requests = {row["group"]: row["requests"] for row in spend["rows"]}
            assert requests == {DEMO_TENANT: 4, "dev": 4}
            with httpx.Client(base_url=gateway.url) as browser:
                browser.post("/console/login", data={"admin_key": ADMIN_KEY})
                page = browser.get("/console").text
            assert page.count(f"<td>{DEMO_KEY_ID}</td>") >= 5  # the key list and 4 requests
