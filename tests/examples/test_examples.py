"""Every example in examples/ runs against `gateway dev` as the README tells a user to run
it, and shows what its comment says it shows (`make examples` runs this file alone)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dev_gateway import DevGateway, dev_gateway

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

# each curl script, and what its output must hold to show what its comment promises
CURL = {
    "01-hello.sh": ["HTTP/1.1 200", "x-gateway-model:", "x-gateway-cost-usd:"],
    "02-stream.sh": ["data: [DONE]", '"usage"'],
    "03-tools.sh": ['"tool_calls"', '"finish_reason":"stop"'],
    "04-structured.sh": ["HTTP/1.1 200", '"content":"{'],
    "05-rate-limit.sh": ["HTTP/1.1 429", "retry-after:"],
    "06-budget.sh": ["HTTP/1.1 429", "insufficient_quota"],
    "07-prefix-affinity.sh": ["x-gateway-replica:", "cached_tokens"],
    "08-spend.sh": ['"rows"'],
    "09-route-override.sh": ["x-gateway-route:", "emulated-llama"],
    "10-errors.sh": ["HTTP/1.1 401", "HTTP/1.1 404", "HTTP/1.1 400", '"param"'],
    "11-health-metrics.sh": ["limits_enforced", "gateway_requests_total"],
    "12-learned-route.sh": ["auto-learned", "threshold"],
    # the hit is priced 0
    "13-cache.sh": ["x-gateway-cache: miss", "x-gateway-cache: hit\nx-gateway-cost-usd: 0\n"],
}
# Python examples and the client package each needs (instructor is installed by hand:
# see examples/python/instructor_extract.py)
PYTHON = {
    "openai_sdk.py": "openai",
    "langchain_chat.py": "langchain_openai",
    "pydantic_ai_agent.py": "pydantic_ai",
    "litellm_client.py": "litellm",
    "instructor_extract.py": "instructor",
}


@pytest.fixture(scope="module")
def dev() -> Iterator[DevGateway]:
    with dev_gateway() as gateway:
        yield gateway


def test_every_example_is_listed_here() -> None:
    """A new example without a row here would go untested."""
    assert {p.name for p in (EXAMPLES / "curl").glob("[0-9]*.sh")} == set(CURL)
    assert {p.name for p in (EXAMPLES / "python").glob("*.py")} == set(PYTHON)


@pytest.mark.parametrize("script", sorted(CURL))
def test_curl_example(dev: DevGateway, script: str) -> None:
    done = subprocess.run(
        ["bash", str(EXAMPLES / "curl" / script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**dev.env, "GATEWAY_URL": dev.url},
    )
    assert done.returncode == 0, f"{script}: {done.stderr}"
    shown = done.stdout.lower()
    missing = [marker for marker in CURL[script] if marker.lower() not in shown]
    assert missing == [], f"{script} printed:\n{done.stdout}"


@pytest.mark.parametrize("example", sorted(PYTHON))
def test_python_example(dev: DevGateway, example: str) -> None:
    if importlib.util.find_spec(PYTHON[example]) is None:
        pytest.skip(f"{PYTHON[example]} is not installed (the example says how to install it)")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "python" / example)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**dev.env, "GATEWAY_BASE_URL": dev.base_url, "GATEWAY_URL": dev.url},
    )
    assert done.returncode == 0, f"{example}: {done.stderr}"
    assert done.stdout.strip(), f"{example} printed nothing"
