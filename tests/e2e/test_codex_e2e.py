"""The Codex CLI itself, as a user runs it against a gateway: non-interactive `codex
exec` with a config whose model provider is a real `gateway serve` (the Responses API,
a gateway key), on each of the four model families behind strict fakes. Each run is a
tool round trip: the model asks Codex to run `cat notes.txt`, Codex runs it, the model
answers with what the file said, and that answer is Codex's last message.

What it proves: Codex's requests (a `namespace` tool, the built-in `web_search`,
`client_metadata`, `include`, `prompt_cache_key`) are translated for chat, Anthropic and
Gemini upstreams without a field those refuse; the namespace's functions reach the
model flat and a call to one comes back in Codex's namespace form.

Codex is installed with npm into build/agents/ (`make test-agents` installs it; see
tests/e2e/coding_agents.py). Without it installed, these tests report themselves
skipped unless GATEWAY_TEST_AGENTS=1 asks for the install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.coding_agents import (
    AGENT_KEY,
    FAMILIES,
    INSTALL_DIR,
    SECRET_LINE,
    AgentUpstreams,
    ScriptedTool,
    agent_upstreams,
    agents_gateway,
    installed_cli,
)
from tests.support.gateway_process import GatewayProcess

RUN_SECONDS = 150
CODEX = INSTALL_DIR / "node_modules" / ".bin" / "codex"

pytestmark = pytest.mark.skipif(
    not CODEX.exists() and os.environ.get("GATEWAY_TEST_AGENTS") != "1",
    reason="Codex is not installed in build/agents: `make test-agents` installs and runs it",
)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="codex-e2e-"))
    (path / "notes.txt").write_text(SECRET_LINE + "\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def codex_gateway() -> Iterator[tuple[GatewayProcess, AgentUpstreams]]:
    installed_cli("codex")
    tool = ScriptedTool("exec_command", {"cmd": "cat notes.txt"})
    with agent_upstreams(tool) as up, agents_gateway(up) as gateway:
        yield gateway, up


def codex_config(gateway: GatewayProcess, model: str) -> str:
    """A user's ~/.codex/config.toml pointing Codex at the gateway."""
    return "\n".join(
        [
            f'model = "{model}"',
            'model_provider = "gateway"',
            "[model_providers.gateway]",
            'name = "gateway"',
            f'base_url = "{gateway.base_url}"',
            'env_key = "GATEWAY_API_KEY"',
            'wire_api = "responses"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "",
        ]
    )


def run_codex(gateway: GatewayProcess, workdir: Path, model: str, prompt: str) -> str:
    home = workdir / f"home-{model}"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(codex_config(gateway, model))
    last = workdir / f"last-{model}.txt"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "GATEWAY_API_KEY": AGENT_KEY,
        "CI": "1",
    }
    command = [str(CODEX), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access"]
    command += ["--output-last-message", str(last), prompt]
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=RUN_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"codex did not finish in {RUN_SECONDS}s; gateway log:\n{gateway.log()[-3000:]}"
        ) from expired
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert done.returncode == 0 and last.exists(), (
        f"codex exited {done.returncode}: {output[-3000:]}\ngateway log:\n{gateway.log()[-3000:]}"
    )
    return last.read_text()


@pytest.mark.parametrize("family", FAMILIES)
def test_codex_completes_a_tool_round_trip_on_every_family(
    codex_gateway: tuple[GatewayProcess, AgentUpstreams], workdir: Path, family: str
) -> None:
    gateway, up = codex_gateway
    before = len(up.bodies(family))
    answer = run_codex(gateway, workdir, family, "Run cat notes.txt and tell me what it says.")
    assert SECRET_LINE in answer, answer
    sent = up.bodies(family)[before:]
    assert len(sent) >= 2, "the tool call and the turn after it reach the family's provider"
    # Codex's namespace tool reached the model as flat functions, its metadata did not
    first = str(sent[0])
    assert "multi_agent_v1__" in first
    assert "client_metadata" not in first and "x-codex-window-id" not in first


# one family per translation (chat, Anthropic, Gemini): DeepSeek shares GPT's
@pytest.mark.parametrize("family", ["gpt-4.1", "claude-sonnet-4-5", "gemini-2.5-flash"])
def test_a_call_to_a_namespaced_function_reaches_codex_in_its_namespace(
    codex_gateway: tuple[GatewayProcess, AgentUpstreams], workdir: Path, family: str
) -> None:
    gateway, up = codex_gateway
    before = len(up.bodies(family))
    shell = up.script.tool
    up.script.tool = ScriptedTool("close_agent", {"target": "agent-none"})
    try:
        run_codex(gateway, workdir, family, "Close the agent agent-none.")
    finally:
        up.script.tool = shell
    sent = up.bodies(family)[before:]
    assert len(sent) >= 2
    # Codex ran its own multi_agent_v1.close_agent (a flat name it would call
    # unsupported): the agent id it was given comes back in the tool's result
    result = str(sent[-1])
    assert "agent-none" in result and "unsupported" not in result.lower()
