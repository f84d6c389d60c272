"""docker-compose.yml, checked two ways.

Without Docker (always): every image, build, mounted file, command, port and address
agrees with the Dockerfiles and the configs in `config/` and `deploy/`.

Started for real (`make compose-test`, which builds the images offline first and sets
GATEWAY_COMPOSE_TEST=1; skipped otherwise): traffic through both gateways with the openai
SDK, one limit shared by both, a gateway and a GPU replica killed mid-load with no
ledger record lost, a Redis restart that budgets survive (AOF), and every dashboard
panel's query run against the stack's own Prometheus."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
import yaml

from gateway.cli.main import build_parser
from gateway.metering.ledger_record import LedgerRecord
from gateway.settings import Settings, load_settings
from tests.observability.prometheus_server import alert_expressions, dashboard_expressions
from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
GATEWAY_IMAGE_SERVICES = [n for n, s in SERVICES.items() if s.get("image") == "gateway:local"]
GATEWAYS = [n for n, s in SERVICES.items() if "serve" in s.get("command", [])]
EMULATORS = [n for n, s in SERVICES.items() if "emulate" in s.get("command", [])]


def bind_mounts(service: str) -> list[tuple[Path, str]]:
    mounts = []
    for volume in SERVICES[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts.append(((REPO / source).resolve(), target))
    return mounts


def host_path(service: str, container_path: str) -> Path:
    """The checkout's file a container sees at `container_path`, through the bind mounts."""
    for source, target in sorted(bind_mounts(service), key=lambda m: -len(m[1])):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return source / container_path[len(target) :].lstrip("/")
    raise AssertionError(f"{service}: {container_path} is not mounted from the checkout")


def flag(command: list[str], name: str) -> str:
    for i, part in enumerate(command):
        if part == name:
            return command[i + 1]
        if part.startswith(f"{name}="):
            return part.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {command}")


def published_container_ports(service: str) -> set[int]:
    ports = {int(str(p).split(":")[-1]) for p in SERVICES[service].get("ports", [])}
    return ports | {int(p) for p in SERVICES[service].get("expose", [])}


def compose_environment(service: str) -> dict[str, str]:
    raw = SERVICES[service].get("environment", {})
    # `${VAR:-default}` as compose resolves it with VAR unset
    return {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v)) for k, v in raw.items()}


def gateway_settings() -> Settings:
    config = host_path("gateway-1", flag(SERVICES["gateway-1"]["command"], "--config"))
    return load_settings(config, env=compose_environment("gateway-1"))


def dockerfile() -> list[str]:
    return (REPO / "Dockerfile").read_text().splitlines()


def test_compose_runs_two_gateways_redis_prometheus_grafana_and_two_emulator_replicas():
    assert {"redis", "prometheus", "grafana"} <= set(SERVICES)
    assert len(GATEWAYS) == 2
    assert len(EMULATORS) == 2


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_a_pinned_image_or_a_build_with_a_dockerfile(service: str):
    spec = SERVICES[service]
    if "build" in spec:
        build = spec["build"]
        assert (REPO / build["context"] / build.get("dockerfile", "Dockerfile")).is_file()
        assert spec["image"].endswith(":local")
    else:
        name, _, tag = spec["image"].rpartition(":")
        assert name and tag and tag != "latest", spec["image"]


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_bind_mounted_path_exists(service: str):
    for source, _ in bind_mounts(service):
        assert source.exists(), f"{service}: {source} does not exist"


@pytest.mark.parametrize("service", GATEWAY_IMAGE_SERVICES)
def test_every_gateway_image_command_parses_with_the_gateway_cli(service: str):
    command = SERVICES[service]["command"]
    assert command[0] == "gateway"
    args = build_parser().parse_args(command[1:])
    assert args.command == command[1]
    if args.command == "emulate":
        assert args.host == "0.0.0.0"
        assert args.port in published_container_ports(service)


@pytest.mark.parametrize(
    "path", ["Dockerfile", "deploy/docker/redis.Dockerfile", "deploy/docker/prometheus.Dockerfile"]
)
def test_every_image_builds_from_the_debootstrapped_base(path: str):
    lines = (REPO / path).read_text().splitlines()
    assert "ARG BASE_IMAGE=gateway-base:bookworm" in lines
    assert [line for line in lines if line.startswith("FROM")] == ["FROM ${BASE_IMAGE}"]
    script = (REPO / "deploy/docker/build-images.sh").read_text()
    assert "BASE_IMAGE=gateway-base:bookworm" in script and "debootstrap" in script


def test_the_dockerfile_installs_the_gateway_from_wheels_and_serves_the_compose_config():
    lines = dockerfile()
    cmd = json.loads(next(line for line in lines if line.startswith("CMD")).removeprefix("CMD"))
    for gateway in GATEWAYS:
        assert cmd == SERVICES[gateway]["command"]
    assert any("pip install --no-index --find-links" in line for line in lines)
    for line in lines:
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                if source.startswith("build/"):
                    # build output: the image build script makes it first
                    script = (REPO / "deploy/docker/build-images.sh").read_text()
                    assert (
                        '--wheel-dir "$OUT/wheels"' in script and source == "build/compose/wheels"
                    )
                    continue
                assert (REPO / source).exists(), line
                ignored = (REPO / ".dockerignore").read_text().splitlines()
                assert source not in ignored, f"{source} is copied but .dockerignore drops it"


def test_the_gateway_config_loads_and_listens_on_the_published_port():
    settings = gateway_settings()
    server = settings.config.server
    assert server.host == "0.0.0.0"
    for gateway in GATEWAYS:
        assert server.port in {int(str(p).split(":")[-1]) for p in SERVICES[gateway]["ports"]}
        if server.workers > 1:
            assert compose_environment(gateway).get("PROMETHEUS_MULTIPROC_DIR")
    for policy in settings.policy_paths:
        assert policy.is_relative_to(REPO), policy


def test_the_gateway_store_is_the_compose_redis_with_aof_persistence():
    store = gateway_settings().config.store
    assert store.kind == "redis"
    assert store.redis_url is not None
    url = urlsplit(store.redis_url.get_secret_value())
    redis = SERVICES["redis"]
    assert url.hostname == "redis"
    assert url.port == int(flag(redis["command"], "--port"))
    assert flag(redis["command"], "--appendonly") == "yes"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    for gateway in GATEWAYS:
        assert "redis" in SERVICES[gateway]["depends_on"]


def test_the_gpu_pool_points_at_each_emulator_service_and_its_port():
    pools = [p.replicas for p in gateway_settings().config.providers.values() if p.replicas]
    assert len(pools) == 1
    replicas = {(urlsplit(u).hostname, urlsplit(u).port) for u in pools[0].urls}
    emulators = {(n, int(flag(SERVICES[n]["command"], "--port"))) for n in EMULATORS}
    assert replicas == emulators
    assert pools[0].metrics_style == "sglang"


def prometheus_config() -> dict[str, Any]:
    path = host_path("prometheus", flag(SERVICES["prometheus"]["command"], "--config.file"))
    return yaml.safe_load(path.read_text())


def scrape_targets(job: str) -> set[tuple[str, int]]:
    (config,) = [c for c in prometheus_config()["scrape_configs"] if c["job_name"] == job]
    return {
        (target.split(":")[0], int(target.split(":")[1]))
        for static in config["static_configs"]
        for target in static["targets"]
    }


def test_prometheus_scrapes_the_gateway_and_every_gpu_replica_where_they_listen():
    port = gateway_settings().config.server.port
    assert scrape_targets("gateway") == {(gateway, port) for gateway in GATEWAYS}
    emulators = {(n, int(flag(SERVICES[n]["command"], "--port"))) for n in EMULATORS}
    assert scrape_targets("gpu-backends") == emulators
    config_dir = host_path("prometheus", "/etc/prometheus")
    for rule_file in prometheus_config()["rule_files"]:
        assert (config_dir / rule_file).is_file()
    assert 9090 in published_container_ports("prometheus")


def test_grafana_provisions_the_prometheus_datasource_and_the_dashboards_it_mounts():
    provisioning = host_path("grafana", "/etc/grafana/provisioning")
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus"
    assert url.port in published_container_ports("prometheus")

    (provider,) = yaml.safe_load((provisioning / "dashboards" / "gateway.yaml").read_text())[
        "providers"
    ]
    dashboards = host_path("grafana", provider["options"]["path"])
    files = list(dashboards.glob("*.json"))
    assert files
    for path in files:
        dashboard = json.loads(path.read_text())
        uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
        assert uids == {datasource["uid"]}
    home = compose_environment("grafana")["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path("grafana", home).is_file()
    assert 3000 in published_container_ports("grafana")


# ---------------------------------------------------------------- the stack, for real

LIVE = os.environ.get("GATEWAY_COMPOSE_TEST") == "1"
_skip_unless_live = pytest.mark.skipif(
    not LIVE,
    reason="the compose stack runs with `make compose-test` (builds its images offline, ~5 min)",
)


def live(test: Any) -> Any:
    """A test of the running stack: skipped unless asked for; starting the stack counts
    towards the first one's time, so each gets 15 minutes."""
    return pytest.mark.timeout(900)(_skip_unless_live(test))


DEV_KEY = "gw-dev-key"
LIMITED_KEY = "gw-compose-limited"
BUDGET_KEY = "gw-compose-budget"
LIMITED_RPM = 30
HELLO = [{"role": "user", "content": "hello compose"}]
# panels the compose test's own traffic must fill
CORE_PANELS = (
    "Requests per second by route",
    "Tokens per second",
    "Rate-limit refusals",
    "Budget used by tenant",
    "Running requests per replica",
    "KV cache usage per replica",
)


class Stack:
    """The compose project, started by the test on free host ports."""

    def __init__(self) -> None:
        self.project = f"gwtest{os.getpid()}"
        self.ports = {
            "GATEWAY_1_PORT": free_port(),
            "GATEWAY_2_PORT": free_port(),
            "PROMETHEUS_PORT": free_port(),
        }
        self.env = {**os.environ, **{k: str(v) for k, v in self.ports.items()}}

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        result = subprocess.run(
            ["docker-compose", "-p", self.project, *args],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)}: {result.stderr}")
        return result.stdout

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def gateway_url(self, number: int) -> str:
        return f"http://127.0.0.1:{self.ports[f'GATEWAY_{number}_PORT']}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['PROMETHEUS_PORT']}"

    def ready(self, number: int) -> bool:
        try:
            response = httpx.get(self.gateway_url(number) + "/readyz", timeout=2)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and response.json()["store"]["state"] == "ok"

    def python_in(self, service: str, code: str) -> str:
        return self.compose("exec", "-T", service, "python", "-c", code)

    def ledger(self) -> list[LedgerRecord]:
        """Every record of the ledger stream, read from inside the stack's network."""
        code = (
            "import json, redis; r = redis.Redis(host='redis');"
            "print(json.dumps([f[b'record'].decode() for _, f in"
            " r.xrange('gw:{ledger}:stream', '-', '+')]))"
        )
        return [
            LedgerRecord.from_json(raw) for raw in json.loads(self.python_in("gateway-1", code))
        ]

    def redis_hash(self, key: str) -> dict[str, str]:
        code = (
            "import json, redis; r = redis.Redis(host='redis', decode_responses=True);"
            f"print(json.dumps(r.hgetall({key!r})))"
        )
        return dict(json.loads(self.python_in("gateway-1", code)))


def wait_until(predicate: Any, timeout: float, step: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if not LIVE:
        pytest.skip("the compose stack runs with `make compose-test`")
    stack = Stack()
    started = time.monotonic()
    stack.compose("up", "-d")
    try:
        assert wait_until(lambda: stack.ready(1) and stack.ready(2), 180), stack.compose("ps")
        print(f"\nstack up in {time.monotonic() - started:.0f} s: {stack.compose('ps')}")
        yield stack
    finally:
        stack.compose("down", "-v", "--remove-orphans", check=False)


@dataclass
class Served:
    gateway: int
    status: int | None  # None: the connection failed (the gateway was gone)
    request_id: str = ""
    code: str | None = None


async def chat(client: openai.AsyncOpenAI, number: int, **options: Any) -> Served:
    options.setdefault("max_tokens", 8)
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=HELLO, **options
        )
    except openai.APIStatusError as error:
        return Served(number, error.status_code, code=error.code)
    except openai.APIConnectionError:
        return Served(number, None)
    raw.parse()
    return Served(number, raw.status_code, raw.headers["x-request-id"])


def sdk(stack: Stack, number: int, key: str, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=stack.gateway_url(number) + "/v1", api_key=key, max_retries=retries, timeout=30
    )


@live
def test_both_gateways_serve_the_openai_sdk_plain_and_streaming(stack: Stack) -> None:
    for number in (1, 2):
        client = openai.OpenAI(base_url=stack.gateway_url(number) + "/v1", api_key=DEV_KEY)
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=HELLO, max_tokens=16
        )
        reply = raw.parse()
        assert raw.headers["x-gateway-model"] == "emulated-llama"
        assert reply.choices[0].message.content and reply.usage is not None
        chunks = list(
            client.chat.completions.create(
                model="auto", messages=HELLO, max_tokens=16, stream=True,
                stream_options={"include_usage": True},
            )
        )  # fmt: skip
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.strip()
    models = openai.OpenAI(base_url=stack.gateway_url(2) + "/v1", api_key=DEV_KEY).models.list()
    assert "emulated-llama" in {m.id for m in models}


@live
def test_one_request_limit_holds_across_both_gateways(stack: Stack) -> None:
    async def alternate() -> tuple[list[Served], float]:
        """One request at a time, gateway 1, gateway 2, gateway 1, ..."""
        clients = {n: sdk(stack, n, LIMITED_KEY) for n in (1, 2)}
        started = time.monotonic()
        answers = []
        for i in range(LIMITED_RPM * 2):
            answers.append(await chat(clients[1 + i % 2], 1 + i % 2))
        elapsed = time.monotonic() - started
        for client in clients.values():
            await client.close()
        return answers, elapsed

    answers, elapsed = asyncio.run(alternate())
    admitted = [a for a in answers if a.status == 200]
    refused = [a for a in answers if a.status == 429]
    assert len(admitted) + len(refused) == len(answers), Counter(a.status for a in answers)
    refill = int(elapsed * LIMITED_RPM / 60) + 1
    assert LIMITED_RPM <= len(admitted) <= LIMITED_RPM + refill, (len(admitted), elapsed)
    assert {a.code for a in refused} == {"rate_limit_exceeded"}
    # each gateway admitted about half: one bucket, not one per gateway
    per_gateway = Counter(a.gateway for a in admitted)
    assert per_gateway[1] < LIMITED_RPM and per_gateway[2] < LIMITED_RPM, per_gateway
    assert {a.gateway for a in refused} == {1, 2}
    print(
        f"shared limit: {len(admitted)} of {len(answers)} admitted, alternating gateways "
        f"({dict(per_gateway)}) in {elapsed:.1f} s, limit {LIMITED_RPM}/min"
    )


def docker_kill(container: str, signal: str) -> None:
    subprocess.run(
        ["docker", "kill", "--signal", signal, container], check=True, capture_output=True
    )


@live
def test_killing_a_gateway_and_a_gpu_replica_mid_load_loses_no_ledger_record(
    stack: Stack,
) -> None:
    before = {r.request_id for r in stack.ledger()}
    answers: list[Served] = []
    killed: dict[str, float] = {}

    async def load(number: int, stop: asyncio.Event) -> None:
        client = sdk(stack, number, DEV_KEY)
        while not stop.is_set():
            answers.append(await chat(client, number, max_tokens=16))
            if answers[-1].status is None:
                await asyncio.sleep(0.1)  # the gateway is gone: don't spin
        await client.close()

    async def run() -> None:
        stop = asyncio.Event()
        workers = [asyncio.create_task(load(1 + i % 2, stop)) for i in range(12)]
        await asyncio.sleep(3)
        started = time.monotonic()
        # the gateway as a pod eviction stops it (SIGTERM: drain, flush the ledger),
        # the GPU replica as a crash (SIGKILL)
        await asyncio.to_thread(docker_kill, stack.container("gateway-2"), "SIGTERM")
        await asyncio.to_thread(docker_kill, stack.container("emulator-1"), "SIGKILL")
        killed["at"] = time.monotonic() - started
        await asyncio.sleep(4)
        stop.set()
        await asyncio.gather(*workers)

    try:
        asyncio.run(run())
    finally:
        # bring the killed containers back for the tests after this one
        stack.compose("up", "-d")
        assert wait_until(lambda: stack.ready(1) and stack.ready(2), 180)
    by_gateway = {n: Counter(a.status for a in answers if a.gateway == n) for n in (1, 2)}
    # the surviving gateway retried the dead GPU replica's requests on the other one
    assert set(by_gateway[1]) == {200}, by_gateway
    served_ids = {a.request_id for a in answers if a.status == 200}
    assert wait_until(lambda: served_ids <= {r.request_id for r in stack.ledger()}, 30), len(
        served_ids - {r.request_id for r in stack.ledger()}
    )
    new = [r for r in stack.ledger() if r.request_id not in before]
    recorded = Counter(r.request_id for r in new)
    lost_unseen = set(recorded) - served_ids
    print(
        f"kill: {len(answers)} requests, by gateway {by_gateway}; {len(served_ids)} served, "
        f"all in the ledger once; {len(lost_unseen)} recorded requests whose answer the "
        f"client never got (in flight on the killed gateway)"
    )
    assert all(count == 1 for count in recorded.values())


@live
def test_budgets_survive_a_redis_restart(stack: Stack) -> None:
    async def spend_until_refused() -> list[Served]:
        clients = {n: sdk(stack, n, BUDGET_KEY) for n in (1, 2)}
        answers: list[Served] = []
        while not answers or answers[-1].status == 200:
            number = 1 + len(answers) % 2
            answers.append(await chat(clients[number], number, max_tokens=16))
            assert len(answers) < 500
        for client in clients.values():
            await client.close()
        return answers

    answers = asyncio.run(spend_until_refused())
    assert answers[-1].code == "insufficient_quota", answers[-1]
    day = time.strftime("%Y-%m-%d", time.gmtime())
    budget_key = f"gw:{{t:compose-budget}}:budget:tenant:day:{day}"
    spent_before = stack.redis_hash(budget_key)
    assert int(spent_before.get("spent", 0)) > 0, spent_before
    ledger_before = len(stack.ledger())

    started = time.monotonic()
    stack.compose("restart", "redis")
    assert wait_until(lambda: stack.ready(1) and stack.ready(2), 60)
    recovered = time.monotonic() - started

    assert stack.redis_hash(budget_key)["spent"] == spent_before["spent"]
    assert len(stack.ledger()) >= ledger_before

    async def once_on_each() -> list[Served]:
        clients = {n: sdk(stack, n, BUDGET_KEY) for n in (1, 2)}
        answers = [await chat(clients[n], n, max_tokens=16) for n in (1, 2)]
        for client in clients.values():
            await client.close()
        return answers

    after = asyncio.run(once_on_each())
    assert [a.code for a in after] == ["insufficient_quota"] * 2, after
    print(
        f"redis restart: {sum(a.status == 200 for a in answers)} requests spent the budget "
        f"(spent {spent_before['spent']} micro-USD); after the restart ({recovered:.1f} s to "
        f"ready) the same spend is there and both gateways still refuse; ledger "
        f"{ledger_before} -> {len(stack.ledger())} records"
    )


@live
def test_every_dashboard_panel_query_runs_against_the_stack_prometheus(stack: Stack) -> None:
    prometheus = httpx.Client(base_url=stack.prometheus_url, timeout=10)

    def query(promql: str) -> dict[str, Any]:
        return dict(prometheus.get("/api/v1/query", params={"query": promql}).json())

    def scraped_twice() -> bool:
        body = query('min(count_over_time(up{job="gateway"}[5m])) >= 2 and min(up) == 1')
        return bool(body.get("data", {}).get("result"))

    assert wait_until(scraped_twice, 90), prometheus.get("/api/v1/targets").json()
    expressions = dashboard_expressions()
    assert expressions
    broken, empty = [], []
    for expression in expressions:
        body = query(expression.promql)
        if body.get("status") != "success":
            broken.append(f"{expression.source}: {body.get('error')}")
        elif not body["data"]["result"]:
            empty.append(expression.source)
    for expression in alert_expressions():
        body = query(expression.promql)
        if body.get("status") != "success":
            broken.append(f"{expression.source}: {body.get('error')}")
    assert not broken, broken
    # the traffic of the tests before this one shows on the core panels
    core = [e.source for e in expressions if any(t in e.source for t in CORE_PANELS)]
    assert len(core) >= len(CORE_PANELS)
    assert not [source for source in core if source in empty], empty
    with_data = len(expressions) - len(empty)
    assert with_data >= len(expressions) // 2, empty
    print(
        f"dashboard: {len(expressions)} panel queries and {len(alert_expressions())} alert "
        f"rules ran on the stack's Prometheus, none broken; {with_data} returned data, "
        f"{len(empty)} empty (no such event in this run): {empty}"
    )
