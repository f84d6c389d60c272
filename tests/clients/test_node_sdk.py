"""The official `openai` Node SDK against `gateway dev`, by running the shipped example
(`examples/node/openai_sdk.mjs`: plain, stream, tools, structured output).

The SDK is installed with npm into a folder outside the repository (cached in the
system's temp folder between runs; never a committed node_modules). Without npm, or when
the install fails, the test is skipped with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.dev_gateway import DEV_KEY, DevGateway

REPO = Path(__file__).resolve().parents[2]
SDK = "openai@7.55.0"


@pytest.fixture(scope="module")
def node_folder() -> Path:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("npm/node not on PATH: the Node SDK test needs them")
    folder = Path(tempfile.gettempdir()) / "gateway-test-node" / SDK.replace("@", "-")
    if not (folder / "node_modules" / "openai" / "package.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text('{"private": true, "type": "module"}\n')
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", SDK],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.skip(f"npm could not install {SDK}: {done.stderr.strip()[-300:]}")
    shutil.copy(REPO / "examples" / "node" / "openai_sdk.mjs", folder / "openai_sdk.mjs")
    return folder


def test_the_node_example_runs_plain_stream_tools_and_structured(
    dev: DevGateway, node_folder: Path
) -> None:
    done = subprocess.run(
        ["node", "openai_sdk.mjs"],
        cwd=node_folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ["PATH"], "GATEWAY_BASE_URL": dev.base_url, "GATEWAY_KEY": DEV_KEY},
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["plain"].startswith("emulated-llama-small ")
    assert lines["stream"] == "true"
    assert lines["tools"] == "get_weather"
    assert set(json.loads(lines["structured"])) == {"name", "price_usd"}
