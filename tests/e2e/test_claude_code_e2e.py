"""Claude Code itself, as a user runs it against a gateway: `claude -p ... --output-format
json` with ANTHROPIC_BASE_URL at a real `gateway serve` and a gateway key in
ANTHROPIC_AUTH_TOKEN, on each of the four model families behind strict fakes. Each run
is a tool round trip (the model asks to Read a file, Claude Code reads it, the model
answers with what it said).

What it proves, per family: on Claude, Claude Code's betas reach Anthropic with the
fields they enable (the fake refuses `context_management` without its beta); on GPT,
Gemini and DeepSeek, the betas and `context_management` are dropped in translation and
`max_tokens: 32000` is clamped to DeepSeek's 8,192 (the fake refuses more).

Claude Code is installed with npm into build/agents/ (`make test-agents` installs it;
see tests/e2e/coding_agents.py). Without it installed, these tests report themselves
skipped unless GATEWAY_TEST_AGENTS=1 asks for the install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.coding_agents import (
    AGENT_KEY,
    DEEPSEEK_MAX_OUTPUT,
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
CLAUDE = INSTALL_DIR / "node_modules" / ".bin" / "claude"

pytestmark = pytest.mark.skipif(
    not CLAUDE.exists() and os.environ.get("GATEWAY_TEST_AGENTS") != "1",
    reason="Claude Code is not installed in build/agents: `make test-agents` installs and runs it",
)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="claude-code-e2e-"))
    (path / "notes.txt").write_text(SECRET_LINE + "\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def claude_gateway(workdir: Path) -> Iterator[tuple[GatewayProcess, AgentUpstreams]]:
    installed_cli("claude")
    tool = ScriptedTool("Read", {"file_path": str(workdir / "notes.txt")})
    with agent_upstreams(tool) as up, agents_gateway(up) as gateway:
        yield gateway, up


def run_claude(gateway: GatewayProcess, workdir: Path, model: str, prompt: str) -> dict[str, Any]:
    home = workdir / f"home-{model}"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway.url,
        "ANTHROPIC_AUTH_TOKEN": AGENT_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        # no internet here: nothing but the gateway may be called
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CI": "1",
    }
    command = [str(CLAUDE), "-p", prompt, "--output-format", "json", "--model", model]
    command += ["--allowedTools", "Read", "--max-turns", "4"]
    try:
        done = subprocess.run(
            command, cwd=workdir, env=env, capture_output=True, timeout=RUN_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"claude did not finish in {RUN_SECONDS}s; gateway log:\n{gateway.log()[-3000:]}"
        ) from expired
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0, (
        f"claude exited {done.returncode}: {output[-2000:]}\n{done.stderr.decode()[-2000:]}\n"
        f"gateway log:\n{gateway.log()[-3000:]}"
    )
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("family", FAMILIES)
def test_claude_code_completes_a_tool_round_trip_on_every_family(
    claude_gateway: tuple[GatewayProcess, AgentUpstreams], workdir: Path, family: str
) -> None:
    gateway, up = claude_gateway
    before = len(up.bodies(family))
    result = run_claude(gateway, workdir, family, "Read notes.txt and tell me what it says.")
    assert result.get("is_error") is False, result
    assert SECRET_LINE in result["result"], result
    sent = up.bodies(family)[before:]
    assert len(sent) >= 2, "the tool call and the turn after it reach the family's provider"
    if family == "claude-sonnet-4-5":
        # the passthrough: the body's beta fields went up with the betas that enable them
        turns = [r for r in up.anthropic.requests[-len(sent) :] if r.path == "/v1/messages"]
        assert any("context_management" in json.loads(r.body) for r in turns)
        assert all("context-management" in r.headers.get("anthropic-beta", "") for r in turns)
    else:
        assert not any("context_management" in body for body in sent)
    if family == "deepseek":
        assert max(body.get("max_tokens") or 0 for body in sent) == DEEPSEEK_MAX_OUTPUT
