"""deploy/kubernetes/, rendered by the same script as `make k8s-render` (kubectl 1.20 from
Debian's kubernetes-client) and checked: every object against the Kubernetes schemas that
kubernetes-validate ships (oldest and newest), and the wiring between objects and the
gateway's own config (probes, drain timing, mounts, secrets, selectors) as the cluster
would read it. Nothing here is applied to a cluster: there is none on this machine."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.settings import load_settings
from tests.fleet.configmap_volume import ConfigMapVolume

REPO = Path(__file__).resolve().parents[2]
RENDER = REPO / "deploy" / "kubernetes" / "render.py"
OVERLAYS = ("dev", "production")
TOOL_MISSING = 3
# the oldest and newest schemas kubernetes-validate ships: the manifests use
# autoscaling/v2 and policy/v1, so Kubernetes 1.25 is the floor
SCHEMA_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
# custom resources, whose schemas come with their operators
CUSTOM_KINDS = {"ServiceMonitor"}
# Secrets the production overlay expects to exist (created by you or an ExternalSecret)
EXTERNAL_SECRETS = {"gateway-provider-keys", "gateway-redis"}

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    out = tmp_path_factory.mktemp("k8s")
    result = subprocess.run(
        [sys.executable, str(RENDER), "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if result.returncode == TOOL_MISSING:
        pytest.skip(f"manifests not rendered: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    return {
        overlay: [d for d in yaml.safe_load_all((out / f"{overlay}.yaml").read_text()) if d]
        for overlay in OVERLAYS
    }


def objects(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in objects(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name}"
    return found[0]


def gateway_deployment(docs: list[Doc]) -> Doc:
    return one(docs, "Deployment", "gateway")


def gateway_container(docs: list[Doc]) -> Doc:
    (container,) = gateway_deployment(docs)["spec"]["template"]["spec"]["containers"]
    return dict(container)


def volume_configmap(docs: list[Doc], mount_path: str) -> Doc:
    container = gateway_container(docs)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == mount_path]
    assert "subPath" not in mount, "kubelet never updates a subPath mount"
    volumes = gateway_deployment(docs)["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    return one(docs, "ConfigMap", volume["configMap"]["name"])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container_env(docs: list[Doc], placeholders: dict[str, str]) -> dict[str, str]:
    """The gateway container's environment as the kubelet builds it: envFrom Secrets
    first, then env in order, `$(VAR)` expanded from variables defined before it."""
    container = gateway_container(docs)
    secrets = {s["metadata"]["name"]: s for s in objects(docs, "Secret")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        name = source["secretRef"]["name"]
        if name in secrets:
            env.update({k: "" for k in secrets[name].get("data", {})})
        else:
            env.update(placeholders)
    for var in container.get("env", []):
        if "valueFrom" in var:
            env[var["name"]] = placeholders.get(var["name"], "secret-value")
            continue
        for ref in re.findall(r"\$\((\w+)\)", var["value"]):
            assert ref in env, f"{var['name']} uses $({ref}) before it is defined"
        env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], var["value"])
    return env


# what an operator fills in for the production overlay's external Secrets
PRODUCTION_SECRETS = {
    "OPENAI_API_KEY": "sk-placeholder",
    "ANTHROPIC_API_KEY": "sk-ant-placeholder",
    "GEMINI_API_KEY": "placeholder",
    "DEEPSEEK_API_KEY": "placeholder",
    "ACME_BACKEND_KEY_HASH": "sha256:" + "a" * 64,
    "ACME_CI_KEY_HASH": "sha256:" + "b" * 64,
    "GATEWAY_REDIS_PASSWORD": "redis-password",
}


def mount_configmaps(docs: list[Doc], root: Path) -> Path:
    """Project the config and policies ConfigMaps as kubelet does; the config's path."""
    container = gateway_container(docs)
    config_arg = container["args"][container["args"].index("--config") + 1]
    for mount in container["volumeMounts"]:
        if mount["mountPath"].startswith("/etc/gateway/"):
            configmap = volume_configmap(docs, mount["mountPath"])
            volume = ConfigMapVolume(root / mount["mountPath"].lstrip("/"))
            volume.project({k: v.encode() for k, v in configmap["data"].items()})
    return root / config_arg.lstrip("/")


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest, rendered: dict[str, list[Doc]]) -> Iterator[str]:
    yield request.param


def test_every_overlay_renders_the_whole_fleet(rendered: dict[str, list[Doc]]) -> None:
    for overlay, docs in rendered.items():
        kinds = {d["kind"] for d in docs}
        assert {
            "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
            "ServiceMonitor", "NetworkPolicy", "ConfigMap",
        } <= kinds, overlay  # fmt: skip
        assert len({d["metadata"].get("namespace") for d in docs}) == 1, overlay
    assert one(rendered["dev"], "StatefulSet", "redis")
    assert not [s for s in objects(rendered["production"], "StatefulSet")]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(
    rendered: dict[str, list[Doc]], version: str
) -> None:
    for overlay, docs in rendered.items():
        for doc in docs:
            where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']} (Kubernetes {version})"
            if doc["kind"] in CUSTOM_KINDS:
                with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                    kubernetes_validate.validate(doc, version, strict=True)
                continue
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{where}: {exc.message} at {list(exc.path)}") from exc


def test_a_broken_manifest_fails_the_schema_check(rendered: dict[str, list[Doc]]) -> None:
    deployment = gateway_deployment(rendered["dev"])
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, SCHEMA_VERSIONS[0], strict=True)


def test_the_service_monitor_scrapes_the_gateway_service_metrics_port(
    overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one(docs, "Service", "gateway")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    assert "http" in ports
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_probes_hit_readyz_and_healthz_on_the_port_the_config_listens_on(
    overlay: str, rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    docs = rendered[overlay]
    container = gateway_container(docs)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] == "http"
    assert container["livenessProbe"]["httpGet"]["port"] == "http"
    settings = loaded_settings(overlay, docs, tmp_path)
    assert settings.config.server.port == ports["http"]
    assert settings.config.server.host == "0.0.0.0"
    service = one(docs, "Service", "gateway")
    assert selects(
        service["spec"]["selector"],
        gateway_deployment(docs)["spec"]["template"]["metadata"]["labels"],
    )
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def loaded_settings(overlay: str, docs: list[Doc], root: Path) -> Any:
    placeholders = PRODUCTION_SECRETS if overlay == "production" else {}
    env = container_env(docs, placeholders)
    return load_settings(mount_configmaps(docs, root), env=env)


def test_the_configmaps_hold_a_config_and_policies_the_gateway_loads(
    overlay: str, rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    docs = rendered[overlay]
    settings = loaded_settings(overlay, docs, tmp_path)
    policies_dir = (tmp_path / "etc/gateway/policies").absolute()
    assert settings.policy_paths
    for path in settings.policy_paths:
        assert path.parent == policies_dir and path.is_symlink(), path
    assert settings.config.store.kind == "redis"
    spill = settings.config.store.spill_dir
    mounts = {m["mountPath"] for m in gateway_container(docs)["volumeMounts"]}
    assert spill in mounts
    workers = settings.config.server.workers
    if workers > 1:
        env = {v["name"]: v.get("value") for v in gateway_container(docs)["env"]}
        assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
        assert "/tmp" in mounts


def test_a_policy_change_swaps_in_place_and_a_config_change_rolls_the_pods(
    overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    policies = volume_configmap(docs, "/etc/gateway/policies")
    config = volume_configmap(docs, "/etc/gateway/config")
    assert policies["metadata"]["name"] == "gateway-policies"
    assert re.fullmatch(r"gateway-config-[a-z0-9]{10}", config["metadata"]["name"])


def test_the_drain_fits_in_the_termination_grace(
    overlay: str, rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    docs = rendered[overlay]
    spec = gateway_deployment(docs)["spec"]
    command = gateway_container(docs)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    grace = loaded_settings(overlay, docs, tmp_path).config.server.shutdown_grace_seconds
    assert pre_stop >= 5, "endpoint removal needs a few seconds to reach every proxy"
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] >= pre_stop + grace + 1
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_provider_keys_come_from_a_secret_and_no_configmap_holds_one(
    overlay: str, rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    docs = rendered[overlay]
    container = gateway_container(docs)
    referenced = {s["secretRef"]["name"] for s in container["envFrom"]}
    referenced |= {
        v["valueFrom"]["secretKeyRef"]["name"] for v in container["env"] if "valueFrom" in v
    }
    assert "gateway-provider-keys" in referenced
    generated = {s["metadata"]["name"] for s in objects(docs, "Secret")}
    if overlay == "production":
        assert not generated, "production Secrets are created outside git"
        assert referenced <= EXTERNAL_SECRETS
    else:
        assert referenced <= generated
    settings = loaded_settings(overlay, docs, tmp_path)
    for provider in settings.config.providers.values():
        if provider.api_key is not None and overlay == "production":
            assert provider.api_key.get_secret_value() in PRODUCTION_SECRETS.values()
    for configmap in objects(docs, "ConfigMap"):
        for text in configmap["data"].values():
            assert not re.search(r"\bsk-[A-Za-z0-9]{8,}", text), configmap["metadata"]["name"]


def test_requests_are_set_and_the_disruption_budget_covers_the_gateway_pods(
    overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    resources = gateway_container(docs)["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]
    pdb = one(docs, "PodDisruptionBudget")
    labels = gateway_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"]["maxUnavailable"] == 1


def test_the_autoscaler_scales_the_gateway_on_cpu_and_in_flight_requests(
    overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "gateway",
    }  # fmt: skip
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "gateway_in_flight"
    assert "replicas" not in gateway_deployment(docs)["spec"], "the HPA owns the count"
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    if overlay == "production":
        assert hpa["spec"]["minReplicas"] >= 3


def test_the_adapter_rule_serves_gateway_in_flight_from_the_gateway_metric() -> None:
    rules = yaml.safe_load((REPO / "deploy/kubernetes/prometheus-adapter/rules.yaml").read_text())
    (rule,) = rules["rules"]["custom"]
    assert rule["name"]["as"] == "gateway_in_flight"
    series = re.match(r"(\w+)\{", rule["seriesQuery"])
    assert series is not None
    assert re.fullmatch(rule["name"]["matches"], series.group(1))
    from gateway.observability.metrics import GatewayMetrics

    exposed = GatewayMetrics().render()[0].decode()
    assert f"# TYPE {series.group(1)} gauge" in exposed


def test_only_gateway_pods_reach_redis(overlay: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[overlay]
    policy = one(docs, "NetworkPolicy", "redis-clients")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    redis_selector = policy["spec"]["podSelector"]["matchLabels"]
    gateway_labels = gateway_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    client_rules = [
        rule for rule in policy["spec"]["ingress"]
        if any(p["port"] == 6379 for p in rule["ports"])
    ]  # fmt: skip
    pod_sources = [
        s["podSelector"]["matchLabels"]
        for r in client_rules
        for s in r["from"]
        if "podSelector" in s
    ]
    # every pod allowed in on the client port is a gateway pod or a Redis node
    for workload in [*objects(docs, "Deployment"), *objects(docs, "StatefulSet")]:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        allowed = any(selects(source, labels) for source in pod_sources)
        is_redis = selects(redis_selector, labels)
        assert allowed == (workload is gateway_deployment(docs) or is_redis), workload["metadata"][
            "name"
        ]
    assert any(selects(source, gateway_labels) for source in pod_sources)
    if overlay == "dev":
        redis = one(docs, "StatefulSet", "redis")
        assert selects(redis_selector, redis["spec"]["template"]["metadata"]["labels"])
        (port,) = redis["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert port["containerPort"] == 6379


def test_the_dev_overlay_wires_the_gateway_to_its_redis_and_emulators(
    rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    from urllib.parse import urlsplit

    docs = rendered["dev"]
    settings = loaded_settings("dev", docs, tmp_path)
    assert settings.config.store.redis_url is not None
    redis_url = urlsplit(settings.config.store.redis_url.get_secret_value())
    redis_service = one(docs, "Service", "redis")
    assert redis_url.hostname == "redis"
    assert redis_url.port == redis_service["spec"]["ports"][0]["port"]
    emulators = one(docs, "StatefulSet", "gpu-emulator")
    service = one(docs, "Service", emulators["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    (pool,) = [p.replicas for p in settings.config.providers.values() if p.replicas]
    expected = {
        (f"gpu-emulator-{i}.{service['metadata']['name']}", service["spec"]["ports"][0]["port"])
        for i in range(emulators["spec"]["replicas"])
    }
    assert {(urlsplit(u).hostname, urlsplit(u).port) for u in pool.urls} == expected


def test_production_points_at_the_operator_redis_cluster(
    rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    from urllib.parse import urlsplit

    docs = rendered["production"]
    settings = loaded_settings("production", docs, tmp_path)
    assert settings.config.store.redis_url is not None
    url = urlsplit(settings.config.store.redis_url.get_secret_value())
    assert url.hostname == "gateway-redis-leader"
    assert url.password == PRODUCTION_SECRETS["GATEWAY_REDIS_PASSWORD"]
    example = yaml.safe_load(
        (REPO / "deploy/kubernetes/overlays/production/redis-cluster.example.yaml").read_text()
    )
    assert url.hostname == f"{example['metadata']['name']}-leader"
    assert example["spec"]["kubernetesConfig"]["redisSecret"]["name"] in EXTERNAL_SECRETS
    assert example["metadata"]["namespace"] == gateway_deployment(docs)["metadata"]["namespace"]
