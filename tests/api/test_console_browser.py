"""The console in a real headless browser (Debian's Chromium, driven by Playwright): log
in with the admin key, create a tenant and a key, use that key with the openai SDK, and
see its request in the recent list with its route, cost and latency. The gateway runs on
a real Redis, so sessions, keys and the ledger are the fleet's. The last screen is kept
at build/console/console.png."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import REPO, GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ADMIN_KEY = "gw-console-admin"
SCREENSHOT = REPO / "build" / "console" / "console.png"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer) -> Iterator[GatewayProcess]:
    with OpenAIFake() as fake:
        config = {
            "server": {"admin_key_hash": key_hash(ADMIN_KEY)},
            "store": {
                "kind": "redis",
                "redis_url": redis_server.url,
                "cluster": False,
                "key_prefix": "console-test",
            },
            "providers": {"fake": openai_provider(fake.base_url)},
        }
        policy = {
            "models": {
                "fast-model": {
                    "deployments": [{"provider": "fake", "upstream_model": "up-fast"}],
                    "prices": {"input": 1.0, "output": 2.0},
                }
            },
            "routes": {"everyday": {"models": ["fast-model"]}},
            "tenants": {"gitops": {"keys": [{"id": "yaml-key", "hash": key_hash("sk-yaml")}]}},
        }
        with GatewayProcess(config, policy) as process:
            yield process


@pytest.fixture
def page(gateway: GatewayProcess) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 1100})
        yield context.new_page()
        browser.close()


def test_log_in_create_a_key_and_see_its_request_in_the_list(
    gateway: GatewayProcess, page: Any
) -> None:
    browser_page = page  # a playwright Page
    visited: list[str] = []
    browser_page.on("request", lambda request: visited.append(request.url))
    browser_page.goto(gateway.url + "/console")
    browser_page.fill("#admin_key", "not-the-key")
    browser_page.click("#login")
    assert "not the admin key" in browser_page.inner_text("#problem")

    browser_page.fill("#admin_key", ADMIN_KEY)
    browser_page.click("#login")
    browser_page.wait_for_selector("#create-tenant")
    [cookie] = browser_page.context.cookies()
    assert cookie["name"] == "gw_console"
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert ADMIN_KEY not in cookie["value"]

    browser_page.fill("#tenant-id", "browser-team")
    browser_page.click("#create-tenant-button")
    assert "Tenant browser-team created" in browser_page.inner_text("#notice")
    browser_page.select_option("#key-tenant", "browser-team")
    browser_page.fill("#key-id", "browser-key")
    browser_page.click("#create-key-button")
    key = browser_page.inner_text("#new-key").strip()
    assert key.startswith("gw-")
    assert "browser-key" in browser_page.inner_text("#key-list")

    client = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)
    reply = client.chat.completions.with_raw_response.create(
        model="everyday", messages=[{"role": "user", "content": "hello from the console test"}]
    )
    request_id = reply.headers["x-request-id"]

    row = ""
    deadline = time.monotonic() + 10
    # the ledger writes to Redis in batches, and one may land between the page's read of
    # spend and its read of recent records: look until both show the request
    while time.monotonic() < deadline:
        browser_page.goto(gateway.url + "/console?range=1d")
        recent = browser_page.inner_text("#recent-requests")
        row = next((line for line in recent.splitlines() if request_id in line), "")
        if row and "browser-team" in browser_page.inner_text("#spend-by-tenant"):
            break
        time.sleep(0.2)
    cells = row.split("\t")
    assert cells[1:6] == ["browser-team", "browser-key", "everyday", "fast-model", "200"], row
    assert cells[6].startswith("$0.") and cells[7].endswith(" ms")
    assert "browser-team" in browser_page.inner_text("#spend-by-tenant")
    assert "fake/up-fast" in browser_page.inner_text("#breakers")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser_page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000
    # the admin key never travelled in a URL
    assert all(ADMIN_KEY not in url for url in visited)

    browser_page.click("#logout")
    browser_page.wait_for_selector("#admin_key")
    browser_page.goto(gateway.url + "/console")
    assert browser_page.query_selector("#create-tenant") is None
