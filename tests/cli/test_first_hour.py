"""Issue 18, end to end: each hurdle of a new user's first hour, against real processes
(`gateway dev` with the shipped dev config, `gateway serve`, `gateway check`) and the
official `openai` SDK."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import time
import tomllib
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from gateway.cli.main import main
from tests.support.dev_gateway import ADMIN_KEY, DEV_KEY, LIMITED_KEY, DevGateway
from tests.support.gateway_process import GatewayProcess, key_hash
from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]


def gateway_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`gateway ARGS` in this process (importing the gateway anew per command costs
    seconds), from the repository root, with `env` in place of the environment."""
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.chdir(REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def dev(shared_dev_gateway: DevGateway) -> DevGateway:
    return shared_dev_gateway


@pytest.fixture
def client(dev: DevGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=dev.base_url, api_key=DEV_KEY, max_retries=0)


HELLO = [{"role": "user", "content": "Hello"}]


# -- dev mode: what it prints, and every feature ---------------------------------------


def test_dev_prints_the_client_limited_and_admin_keys_and_where_it_listens(
    dev: DevGateway,
) -> None:
    log = dev.log()
    assert f"dev client key: {DEV_KEY}" in log
    assert LIMITED_KEY in log and f"dev admin key:  {ADMIN_KEY}" in log
    assert f"gateway listening on http://127.0.0.1:{dev.port}/v1" in log
    for port in dev.emulator_ports:
        assert f"http://127.0.0.1:{port}/v1" in log


def test_model_is_the_served_model_streamed_or_not_and_the_route_is_a_header(
    client: openai.OpenAI,
) -> None:
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)  # type: ignore[arg-type]
    completion = raw.parse()
    assert completion.model == raw.headers["x-gateway-model"] == "emulated-llama-small"
    assert raw.headers["x-gateway-route"].startswith("auto; served=emulated-llama-small")
    stream = client.chat.completions.create(model="auto", messages=HELLO, stream=True)  # type: ignore[arg-type]
    assert {chunk.model for chunk in stream} == {completion.model}


@pytest.mark.parametrize(
    ("route", "scorer_name", "threshold", "prompts"),
    [
        # n-grams and the chat words behind their gate: a worked equation to the larger
        # model, a haiku to the small one
        (
            "auto-learned",
            "ngram-chat-v1",
            0.0452,
            ("Solve for x: 3x + 7 = 22. Show each step.", "Write a haiku about the sea."),
        ),
        # the chat word table: an open question to the larger model, a story to the small
        (
            "auto-chat",
            "chat-words-v1",
            0.3805,
            ("What should I cook tonight?", "Write a story about a dragon."),
        ),
    ],
)
def test_a_learned_route_sends_each_prompt_to_the_tier_its_score_says(
    client: openai.OpenAI, route: str, scorer_name: str, threshold: float, prompts: tuple[str, str]
) -> None:
    """The learned routes in dev mode: the shipped scorer's score decides the tier, and the
    header carries it beside the threshold."""
    from gateway.routing.learned.weights import load_scorer

    scorer = load_scorer(scorer_name)
    served = {}
    for prompt in prompts:
        raw = client.chat.completions.with_raw_response.create(
            model=route,
            max_tokens=8,
            messages=[{"role": "user", "content": prompt}],
        )
        score = scorer.score(prompt)
        tier = "strong" if score >= threshold else "cheap"
        expected = f"reason=learned-{tier}-score-{score:.3f}-threshold-{threshold:.3f}"
        assert expected in raw.headers["x-gateway-route"]
        served[tier] = raw.parse().model
    assert served == {"strong": "emulated-llama", "cheap": "emulated-llama-small"}


def test_a_shared_system_prompt_stays_on_one_replica_of_the_pool(client: openai.OpenAI) -> None:
    system = "You are the support desk of ExampleShop. " + "Policy line. " * 200
    replicas = set()
    cached = []
    for question in ("Where is my parcel?", "Can I return a mug?", "Do you ship to Oslo?"):
        raw = client.chat.completions.with_raw_response.create(
            model="auto",
            max_tokens=8,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
        )
        replicas.add(raw.headers["x-gateway-replica"])
        usage = raw.parse().usage
        assert usage is not None and usage.prompt_tokens_details is not None
        cached.append(usage.prompt_tokens_details.cached_tokens or 0)
    assert len(replicas) == 1 and replicas <= {"emulator/0", "emulator/1"}
    # the replica kept the prompt: later requests reuse most of it from its prefix cache
    assert cached[1] > 500 and cached[2] > 500


def test_structured_output_parses_through_the_gateway(client: openai.OpenAI) -> None:
    class Mug(BaseModel):
        name: str
        price_usd: float
        colours: list[str]

    parsed = client.chat.completions.parse(
        model="auto", messages=[{"role": "user", "content": "A mug?"}], response_format=Mug
    )
    assert isinstance(parsed.choices[0].message.parsed, Mug)


def test_rate_limit_headers_appear_where_a_limit_applies_and_the_bucket_refuses_a_burst(
    dev: DevGateway, client: openai.OpenAI
) -> None:
    unlimited = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)  # type: ignore[arg-type]
    assert not [h for h in unlimited.headers if h.startswith("x-ratelimit-")]
    limited = openai.OpenAI(base_url=dev.base_url, api_key=LIMITED_KEY, max_retries=0)
    remaining = []
    with pytest.raises(openai.RateLimitError) as refused:
        for _ in range(6):
            raw = limited.chat.completions.with_raw_response.create(
                model="auto",
                messages=HELLO,
                max_tokens=8,  # type: ignore[arg-type]
            )
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
    # a bucket of 3: at most 3 pass at once (fewer if an earlier test of the key ran)
    assert len(remaining) <= 3 and remaining == sorted(remaining, reverse=True)
    assert refused.value.code == "rate_limit_exceeded"
    assert int(refused.value.response.headers["retry-after"]) >= 1


def test_the_limited_key_has_a_budget_a_large_request_cannot_fit(dev: DevGateway) -> None:
    limited = openai.OpenAI(base_url=dev.base_url, api_key=LIMITED_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        limited.chat.completions.create(model="best", messages=HELLO, max_tokens=4000)  # type: ignore[arg-type]
    assert refused.value.code == "insufficient_quota"


def test_spend_is_visible_in_dev_with_the_admin_key(dev: DevGateway, client: openai.OpenAI) -> None:
    client.chat.completions.create(model="auto", messages=HELLO)  # type: ignore[arg-type]
    answer = httpx.get(
        dev.url + "/admin/spend",
        params={"group_by": "key"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    served = {row["group"]: row["requests"] for row in answer.json()["rows"]}
    assert served["dev-key"] >= 1
    env = {**dev.env, "GATEWAY_PORT": str(dev.port)}
    done = gateway_cli("spend", "--config", "config/dev.yaml", "--group-by", "key", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split()[:2] == ["dev-key", str(served["dev-key"])] for line in lines)
    assert sum(line.startswith("total") for line in lines) == 1


def test_ungrouped_spend_prints_the_total_row_once(dev: DevGateway) -> None:
    env = {**dev.env, "GATEWAY_PORT": str(dev.port)}
    done = gateway_cli("spend", "--config", "config/dev.yaml", env=env)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines() if line.strip()] == [
        "requests",
        "-----",
        "total",
    ]


def test_explain_runs_on_the_shipped_example_request() -> None:
    done = gateway_cli("route", "--config", "config/dev.yaml", "--explain", "examples/request.json")
    assert done.returncode == 0, done.stderr
    assert "emulated-llama-small" in done.stdout


def test_metrics_name_their_charset_once_and_healthz_answers_head(dev: DevGateway) -> None:
    metrics = httpx.get(dev.url + "/metrics", timeout=10)
    assert metrics.headers["content-type"].count("charset") == 1
    assert "gateway_limits_enforced 1.0" in metrics.text
    assert httpx.head(dev.url + "/healthz", timeout=10).status_code == 200


def test_the_emulated_json_schema_answer_validates(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "tags"],
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    reply = client.chat.completions.create(
        model="auto",
        messages=HELLO,  # type: ignore[arg-type]
        response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}},  # type: ignore[typeddict-item]
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), schema)


# -- gateway dev: a taken emulator port is reported -----------------------------------


def test_dev_refuses_an_emulator_port_another_process_owns() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        done = gateway_cli(
            "dev",
            "--config",
            "config/dev.yaml",
            "--port",
            str(free_port()),
            "--emulator-port",
            str(taken),
        )
    assert done.returncode == 1
    assert f"emulator port(s) {taken}" in done.stderr and "--emulator-port" in done.stderr
    assert "listening" not in done.stdout


# -- gateway check: one run, every problem, no secret ----------------------------------

BROKEN_CONFIG = """
providers:
  anthropic:
    kind: anthropic
    api_key: ${ANTHROPIC_API_KEY}
    timeuots: {read: 30}
  openai:
    kind: openai
    api_key: sk-live-written-into-the-file
policies: [policy.yaml]
"""
BROKEN_POLICY = """
models:
  m1:
    deployments: [{provider: openai, upstream_model: gpt-4.1}]
routes:
  auto: {strategy: cheapest, models: [m1], min_qualty: 0.5}
tenants:
  t1:
    keys: [{id: k1, hash: gw-SECRET-client-key-pasted-here}]
"""


def test_check_reports_every_stage_in_one_run_without_echoing_a_key(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(BROKEN_CONFIG)
    (tmp_path / "policy.yaml").write_text(BROKEN_POLICY)
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    done = gateway_cli("check", "--config", str(tmp_path / "config.yaml"), env=env)
    assert done.returncode == 1
    err = done.stderr
    assert "environment variable ANTHROPIC_API_KEY is not set" in err
    assert "providers.anthropic.timeuots: unknown key" in err
    assert "routes.auto.min_qualty: unknown key" in err
    assert "tenants.t1.keys[0].hash" in err and "looks like a key itself" in err
    assert "gw-SECRET" not in err + done.stdout
    # a provider key in the file: a warning that never quotes it
    assert "providers.openai.api_key: the key is written in the file" in err
    assert "sk-live" not in err + done.stdout


# -- gateway serve: where it listens, where Redis is, and limits off said loudly -------


def test_serve_names_an_unresolvable_redis_without_its_password(tmp_path: Path) -> None:
    config = {
        "store": {
            "kind": "redis",
            "redis_url": "redis://app:hunter2@no-such-host.invalid:6379/0",
            "timeout_ms": 100,
        },
        "providers": {"up": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
    }
    policy = {
        "models": {"m": {"deployments": [{"provider": "up", "upstream_model": "m"}]}},
        "tenants": {"t": {"keys": [{"id": "k", "hash": key_hash("gw-k")}]}},
    }
    with GatewayProcess(config, policy) as gateway:
        ready = httpx.get(gateway.url + "/readyz", timeout=10)
        time.sleep(0.2)
        log = gateway.log()
    assert "store: redis at redis://app:***@no-such-host.invalid:6379/0 is not reachable" in log
    assert "cannot resolve host 'no-such-host.invalid'" in log
    assert "hunter2" not in log
    assert f"gateway listening on http://127.0.0.1:{gateway.port}/v1" in log
    # fail_open keeps it in rotation, but says loudly that limits and budgets are off
    assert ready.status_code == 200
    body = ready.json()
    assert body["store"]["state"] == "degraded"
    assert body["limits_enforced"] is False and "WITHOUT rate limits" in body["warning"]


def test_the_package_licence_is_an_spdx_string() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"


def test_keys_finds_the_dev_gateway_without_flags(dev: DevGateway) -> None:
    """`gateway keys list` in a checkout with `make dev` running: the dev config says where
    the gateway listens and its printed admin key (GATEWAY_PORT only moves the port)."""
    env = {k: v for k, v in dev.env.items() if k not in ("GATEWAY_URL", "GATEWAY_ADMIN_KEY")}
    done = gateway_cli("keys", "list", env={**env, "GATEWAY_PORT": str(dev.port)})
    assert done.returncode == 0, done.stderr
    assert "dev-key" in done.stdout
