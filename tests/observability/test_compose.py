"""docker-compose.yml, checked without Docker: every image, build, mounted file, command,
port and address agrees with the Dockerfile and the configs in `config/` and `deploy/`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.cli.main import build_parser
from gateway.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
GATEWAY_IMAGE_SERVICES = [n for n, s in SERVICES.items() if s.get("build")]
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
    config = host_path("gateway", flag(SERVICES["gateway"]["command"], "--config"))
    return load_settings(config, env=compose_environment("gateway"))


def dockerfile() -> list[str]:
    return (REPO / "Dockerfile").read_text().splitlines()


def test_compose_runs_the_gateway_redis_prometheus_grafana_and_two_emulator_replicas():
    assert {"gateway", "redis", "prometheus", "grafana"} <= set(SERVICES)
    assert len(EMULATORS) == 2


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_a_pinned_image_or_a_build_with_a_dockerfile(service: str):
    spec = SERVICES[service]
    if "build" in spec:
        assert (REPO / spec["build"] / "Dockerfile").is_file()
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


def test_the_dockerfile_builds_from_python_311_slim_and_serves_the_compose_config():
    lines = dockerfile()
    assert lines[next(i for i, line in enumerate(lines) if line.startswith("FROM"))] == (
        "FROM python:3.11-slim"
    )
    cmd = json.loads(next(line for line in lines if line.startswith("CMD")).removeprefix("CMD"))
    assert cmd == SERVICES["gateway"]["command"]
    for line in lines:
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), line
                ignored = (REPO / ".dockerignore").read_text().splitlines()
                assert source not in ignored, f"{source} is copied but .dockerignore drops it"


def test_the_gateway_config_loads_and_listens_on_the_published_port():
    settings = gateway_settings()
    server = settings.config.server
    assert server.host == "0.0.0.0"
    assert server.port in {int(str(p).split(":")[-1]) for p in SERVICES["gateway"]["ports"]}
    for policy in settings.policy_paths:
        assert policy.is_relative_to(REPO), policy
    if server.workers > 1:
        assert compose_environment("gateway").get("PROMETHEUS_MULTIPROC_DIR")


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
    assert "redis" in SERVICES["gateway"]["depends_on"]


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
    assert scrape_targets("gateway") == {("gateway", port)}
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
