"""The admin API on one gateway with the in-memory store (dev mode's contract): bad input
of every kind is a clear OpenAI-shaped 4xx and writes nothing (the audit trail and the
listings are unchanged after it), and the keys it issues serve the openai SDK."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

ADMIN_KEY = "gw-test-admin"
YAML_KEY = "gw-test-yaml-key"
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
                },
                "other-model": {
                    "deployments": [{"provider": "fake", "upstream_model": "up-other"}],
                    "prices": {"input": 1.0, "output": 2.0},
                },
            },
            "tenants": {"gitops": {"keys": [{"id": "yaml-key", "hash": key_hash(YAML_KEY)}]}},
        }
        with GatewayProcess(config, policy) as process:
            yield process


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=gateway.url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
    ) as client:
        yield client


def state(admin: httpx.Client) -> tuple[Any, ...]:
    """Everything a change could have touched."""
    return (
        admin.get("/admin/audit", params={"limit": 1000}).json(),
        admin.get("/admin/tenants").json(),
        admin.get("/admin/keys").json(),
    )


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    assert "Traceback" not in body["message"]
    return body


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param"),
    [
        ("POST", "/admin/tenants", b"{not json", 400, None),
        ("POST", "/admin/tenants", b'["a list"]', 400, None),
        ("POST", "/admin/tenants", b'{"id": "has space"}', 400, "id"),
        ("POST", "/admin/tenants", b'{"id": "t1", "limits": {"requests_per_minute": -1}}', 400,
         "limits.requests_per_minute"),
        ("POST", "/admin/tenants", b'{"id": "t1", "budgets": [{"usd": "lots"}]}', 400,
         "budgets.0.usd"),
        ("POST", "/admin/tenants", b'{"id": "t1", "model_limits": {"nope": {}}}', 400,
         "model_limits"),
        ("POST", "/admin/tenants", b'{"id": "t1", "owner": "x"}', 400, "owner"),
        ("POST", "/admin/tenants", b'{"id": "gitops"}', 409, "id"),
        ("POST", "/admin/keys", b'{"tenant": "nobody", "id": "k"}', 404, "tenant"),
        ("POST", "/admin/keys", b'{"tenant": "gitops", "id": "k"}', 409, "tenant"),
        ("POST", "/admin/keys", b'{"tenant": "base", "id": "k", "models": ["gpt-9"]}', 400,
         "models"),
        ("POST", "/admin/keys", b'{"tenant": "base"}', 400, "id"),
        ("POST", "/admin/keys", b'{"tenant": "base", "id": "base-key"}', 409, None),
        ("POST", "/admin/keys", b'{"tenant": "base", "id": "yaml-key"}', 409, "id"),
        ("PATCH", "/admin/tenants/gitops", b'{"allow_overrides": true}', 409, None),
        ("PATCH", "/admin/tenants/nobody", b"{}", 404, None),
        ("PATCH", "/admin/keys/nobody", b'{"models": null}', 404, None),
        ("POST", "/admin/keys/yaml-key/revoke", b"", 409, None),
        ("POST", "/admin/keys/base-key/rotate", b'{"grace_seconds": -5}', 400, "grace_seconds"),
        ("DELETE", "/admin/tenants/base", b"", 409, None),
        ("GET", "/admin/audit?limit=0", b"", 400, "limit"),
    ],
)  # fmt: skip
def test_bad_admin_input_is_a_clear_4xx_and_writes_nothing(
    admin: httpx.Client,
    method: str,
    path: str,
    body: bytes,
    status: int,
    param: str | None,
) -> None:
    if admin.get("/admin/tenants/base").status_code == 404:
        assert admin.post("/admin/tenants", json={"id": "base"}).status_code == 201
        assert admin.post("/admin/keys", json={"tenant": "base", "id": "base-key"}).status_code
    before = state(admin)
    response = admin.request(method, path, content=body)
    assert response.status_code == status, response.text
    assert error_of(response)["param"] == param
    assert state(admin) == before


def test_admin_endpoints_refuse_client_keys_and_strangers(gateway: GatewayProcess) -> None:
    as_client = httpx.post(
        gateway.url + "/admin/tenants",
        json={"id": "sneaky"},
        headers={"authorization": f"Bearer {YAML_KEY}"},
    )
    assert as_client.status_code == 403
    assert error_of(as_client)["code"] == "admin_key_required"
    stranger = httpx.get(gateway.url + "/admin/keys", headers={"authorization": "Bearer nope"})
    assert stranger.status_code == 401
    missing = httpx.get(gateway.url + "/admin/audit")
    assert missing.status_code == 401 and "Missing admin key" in error_of(missing)["message"]


def test_an_issued_key_serves_the_sdk_within_its_models_and_limits(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    assert admin.post("/admin/tenants", json={"id": "team-sdk"}).status_code == 201
    issued = admin.post(
        "/admin/keys",
        json={
            "tenant": "team-sdk",
            "id": "sdk-key",
            "models": ["fast-model"],
            "limits": {"requests_per_minute": 2, "requests_burst": 2},
        },
    )
    assert issued.status_code == 201
    key = issued.json()["key"]
    listed = admin.get("/admin/keys", params={"tenant": "team-sdk"}).json()["data"]
    assert [k["id"] for k in listed] == ["sdk-key"]
    assert key not in str(listed) and key_hash(key) not in str(listed)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["fast-model"]
    client.chat.completions.create(model="fast-model", messages=HELLO)
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model="other-model", messages=HELLO)
    client.chat.completions.create(model="fast-model", messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="fast-model", messages=HELLO)
    # a runtime change of its models applies to the next request
    changed = admin.patch("/admin/keys/sdk-key", json={"models": None, "limits": None})
    assert changed.status_code == 200 and changed.json()["models"] is None
    client.chat.completions.create(model="other-model", messages=HELLO)
    assert admin.post("/admin/keys/sdk-key/revoke").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="fast-model", messages=HELLO)
    reused = admin.post("/admin/keys", json={"tenant": "team-sdk", "id": "sdk-key"})
    assert reused.status_code == 409 and "already used" in error_of(reused)["message"]
    assert admin.delete("/admin/tenants/team-sdk").status_code == 200
    assert admin.get("/admin/tenants/team-sdk").status_code == 404


def keys_cli(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", "keys", *args, "--url", gateway.url],
        env={**os.environ, "GATEWAY_ADMIN_KEY": ADMIN_KEY},
        capture_output=True,
        text=True,
        timeout=60,
    )


def shown_key(stdout: str) -> str:
    return next(line.split()[1] for line in stdout.splitlines() if line.startswith("key: "))


def test_the_keys_cli_drives_the_same_api(gateway: GatewayProcess, admin: httpx.Client) -> None:
    made = keys_cli(gateway, "tenant-create", "cli-team", "--budget-usd", "5")
    assert made.returncode == 0, made.stderr
    assert "tenant cli-team" in made.stdout and "budget=$5/month" in made.stdout
    issued = keys_cli(
        gateway, "create", "--tenant", "cli-team", "--id", "cli-key", "--models", "fast-model"
    )
    assert issued.returncode == 0, issued.stderr
    key = shown_key(issued.stdout)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)
    client.chat.completions.create(model="fast-model", messages=HELLO)
    assert keys_cli(gateway, "set", "cli-key", "--rpm", "30").returncode == 0
    listed = keys_cli(gateway, "list", "--tenant", "cli-team")
    assert "limits=requests_per_minute:30" in listed.stdout and key not in listed.stdout
    as_json = json.loads(keys_cli(gateway, "list", "--tenant", "cli-team", "--json").stdout)
    assert as_json["data"][0]["limits"] == {"requests_per_minute": 30}
    rotated = keys_cli(gateway, "rotate", "cli-key", "--grace", "0")
    new_key = shown_key(rotated.stdout)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="fast-model", messages=HELLO)
    openai.OpenAI(
        base_url=gateway.base_url, api_key=new_key, max_retries=0
    ).chat.completions.create(model="fast-model", messages=HELLO)
    assert keys_cli(gateway, "revoke", "cli-key").returncode == 0
    audit = keys_cli(gateway, "audit", "--limit", "5").stdout.splitlines()
    assert [line.split()[2] for line in audit[:4]] == [
        "key.revoke", "key.rotate", "key.update", "key.create",
    ]  # fmt: skip
    assert audit[0].split()[1] == getpass.getuser()
    refused = keys_cli(gateway, "create", "--tenant", "nobody", "--id", "x")
    assert refused.returncode == 1
    assert "404: Unknown tenant 'nobody'" in refused.stderr
    gone = subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", "keys", "list", "--url", "http://127.0.0.1:9"],
        env={**os.environ, "GATEWAY_ADMIN_KEY": ADMIN_KEY},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gone.returncode == 1 and "no gateway answered" in gone.stderr


def test_the_console_refuses_strangers_other_sites_and_escapes_what_it_echoes(
    gateway: GatewayProcess, admin: httpx.Client
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10) as browser:
        login = browser.get("/console")
        assert login.status_code == 200 and 'name="admin_key"' in login.text
        assert "script-src" not in login.headers["content-security-policy"]
        assert "default-src 'none'" in login.headers["content-security-policy"]
        before = state(admin)
        unauthenticated = browser.post("/console/tenants", data={"id": "drive-by"})
        assert unauthenticated.status_code == 303
        assert browser.post("/console/login", data={"admin_key": "wrong"}).status_code == 401
        assert state(admin) == before

        signed_in = browser.post("/console/login", data={"admin_key": ADMIN_KEY})
        assert signed_in.status_code == 303
        cookie = signed_in.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and ADMIN_KEY not in cookie
        forged = browser.post(
            "/console/tenants", data={"id": "forged"}, headers={"origin": "http://evil.example"}
        )
        assert forged.status_code == 403 and "another site" in forged.text
        bad_id = browser.post("/console/tenants", data={"id": "<script>alert(1)</script>"})
        assert bad_id.status_code == 400 and "Not created: id:" in bad_id.text
        assert state(admin) == before
        assert admin.post("/admin/tenants", json={"id": "console-esc"}).status_code == 201
        before = state(admin)
        hostile = browser.post(
            "/console/keys",
            data={"tenant": "console-esc", "id": "k-esc", "models": "<script>alert(1)</script>"},
        )
        # the refusal echoes the model name: escaped, never markup
        assert hostile.status_code == 400
        assert "<script" not in hostile.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile.text
        assert state(admin) == before
        assert browser.get("/console").text.count('id="create-tenant"') == 1
