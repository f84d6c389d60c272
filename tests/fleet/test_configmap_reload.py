"""A policy delivered as a Kubernetes ConfigMap volume reloads when kubelet swaps it.

Kubelet never rewrites a visible file: it repoints the `..data` symlink at a new
timestamped directory and deletes the old one (see `configmap_volume.py`). A reloader
that watches the resolved file, or only its mtime and size, misses that or, worse, keeps
reading a directory that no longer exists.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.api.conftest import CLIENT_KEY, policy_for
from tests.fakes.openai_server import OpenAIFake
from tests.fleet.configmap_volume import ConfigMapVolume
from tests.support.gateway_process import GatewayProcess, openai_provider

USER = [{"role": "user", "content": "hi"}]


def reloads(gateway: GatewayProcess, result: str) -> float:
    for line in httpx.get(gateway.url + "/metrics").text.splitlines():
        if line.startswith(f'gateway_policy_reloads_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def wait_for_reloads(gateway: GatewayProcess, count: float, timeout: float = 15) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = reloads(gateway, "success")
        if seen >= count:
            return seen
        time.sleep(0.1)
    return reloads(gateway, "success")


def with_upstream(policy: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    edited = copy.deepcopy(policy)
    edited["models"]["fast-model"]["deployments"][0]["upstream_model"] = upstream_model
    return edited


class ConfigMapGateway:
    """A gateway process whose config and policy are the keys of one ConfigMap volume."""

    def __init__(self, fake: OpenAIFake) -> None:
        config = {"providers": {"fake": openai_provider(fake.base_url)}}
        self.process = GatewayProcess(config, policy_for())
        self.volume = ConfigMapVolume(self.process.dir)
        self.config_text = self.process.config_path.read_bytes()
        self.process.config_path.unlink()
        (self.process.dir / "policy.yaml").unlink()

    def project(self, policy: dict[str, Any], keep_mtimes: bool = False) -> None:
        payload = {"config.yaml": self.config_text, "policy.yaml": yaml.safe_dump(policy).encode()}
        mtimes = None
        if keep_mtimes:
            mtimes = {key: (self.volume.directory / key).stat().st_mtime_ns for key in payload}
        self.volume.project(payload, mtimes_ns=mtimes)


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake() as server:
        yield server


@pytest.fixture(scope="module")
def configmap_gateway(fake: OpenAIFake) -> Iterator[ConfigMapGateway]:
    gateway = ConfigMapGateway(fake)
    gateway.project(policy_for())
    with gateway.process:
        yield gateway


def served_upstream_model(gateway: GatewayProcess, fake: OpenAIFake) -> str:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    client.chat.completions.create(model="fast-model", messages=USER)
    return str(fake.requests[-1].body["model"])


def test_the_volume_is_laid_out_as_kubelet_lays_it(configmap_gateway: ConfigMapGateway) -> None:
    directory = configmap_gateway.process.dir
    payload_dir = configmap_gateway.volume.current_payload_dir()
    assert payload_dir is not None and payload_dir.name.startswith("..20")
    for key in ("config.yaml", "policy.yaml"):
        assert (directory / key).is_symlink()
        assert str((directory / key).readlink()) == f"..data/{key}"
        assert (directory / key).resolve() == (payload_dir / key).resolve()


def test_a_configmap_swap_reloads_the_policy_and_the_old_directory_is_gone(
    configmap_gateway: ConfigMapGateway, fake: OpenAIFake
) -> None:
    gateway = configmap_gateway.process
    before = reloads(gateway, "success")
    first_dir = configmap_gateway.volume.current_payload_dir()
    assert served_upstream_model(gateway, fake) == "upstream-fast"

    configmap_gateway.project(with_upstream(policy_for(), "upstream-v2"))
    assert first_dir is not None and not first_dir.exists()

    assert wait_for_reloads(gateway, before + 1) == before + 1
    assert served_upstream_model(gateway, fake) == "upstream-v2"
    assert reloads(gateway, "failure") == 0
    assert "policy reload rejected" not in gateway.log()


def test_a_swap_to_a_file_of_the_same_size_and_mtime_still_reloads(
    configmap_gateway: ConfigMapGateway, fake: OpenAIFake
) -> None:
    gateway = configmap_gateway.process
    policy_file = gateway.dir / "policy.yaml"
    # same length as the current upstream model name, so only the inode tells them apart
    current = served_upstream_model(gateway, fake)
    replacement = "upstream-v3" if current == "upstream-v2" else current[:-1] + "9"
    assert len(replacement) == len(current)
    old = {path: path.stat() for path in (policy_file, gateway.config_path)}
    before = reloads(gateway, "success")

    configmap_gateway.project(with_upstream(policy_for(), replacement), keep_mtimes=True)
    for path, was in old.items():
        now = path.stat()
        assert (now.st_size, now.st_mtime_ns) == (was.st_size, was.st_mtime_ns)
        assert now.st_ino != was.st_ino

    assert wait_for_reloads(gateway, before + 1) == before + 1
    assert served_upstream_model(gateway, fake) == replacement
