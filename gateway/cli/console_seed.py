"""`gateway dev --seed-console`: once the dev gateway answers, a runtime tenant with a key
and a few requests through it, so the console (/console) has spend, keys and recent
requests to show on a first run. Everything goes through the gateway's own API."""

from __future__ import annotations

import threading
import time

import httpx

DEMO_TENANT = "console-demo"
DEMO_KEY_ID = "demo-key"
PROMPTS = (
    "Say hello in three languages.",
    "Prove that there are infinitely many primes.",
    "Write a haiku about routers.",
    "Summarise the benefits of continuous batching in one sentence.",
)


def start_seeding(url: str, admin_key: str, client_key: str | None) -> threading.Thread:
    thread = threading.Thread(
        target=seed, args=(url, admin_key, client_key), name="console-seed", daemon=True
    )
    thread.start()
    return thread


def seed(url: str, admin_key: str, client_key: str | None, wait_seconds: float = 60) -> bool:
    """True when the tenant, its key and every request went through."""
    with httpx.Client(base_url=url, timeout=30) as client:
        if not _ready(client, wait_seconds):
            print(f"console seed: the gateway at {url} did not become ready", flush=True)
            return False
        admin = {"authorization": f"Bearer {admin_key}", "x-gateway-actor": "dev-seed"}
        client.post(
            "/admin/tenants",
            json={"id": DEMO_TENANT, "budgets": [{"usd": 5, "period": "day"}]},
            headers=admin,
        )
        issued = client.post(
            "/admin/keys",
            json={"tenant": DEMO_TENANT, "id": DEMO_KEY_ID, "limits": {"requests_per_minute": 60}},
            headers=admin,
        )
        keys = [
            k for k in (issued.json().get("key") if issued.is_success else None, client_key) if k
        ]
        served = 0
        for i, prompt in enumerate(PROMPTS * 2):
            key = keys[i % len(keys)]
            answer = client.post(
                "/v1/chat/completions",
                json={
                    "model": "auto",
                    "max_tokens": 32,
                    "messages": [{"role": "user", "content": prompt}],
                },
                headers={"authorization": f"Bearer {key}"},
            )
            served += answer.is_success
    print(
        f"console: {url}/console (log in with the dev admin key; seeded tenant "
        f"{DEMO_TENANT} and {served} requests)",
        flush=True,
    )
    return issued.is_success and served == len(PROMPTS) * 2


def _ready(client: httpx.Client, wait_seconds: float) -> bool:
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        try:
            if client.get("/readyz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False
