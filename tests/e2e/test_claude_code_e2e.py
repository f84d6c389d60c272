"""Claude Code itself, as a user runs it against a gateway: `claude -p ... --output-format
json` with ANTHROPIC_BASE_URL at a real `gateway serve` and a gateway key in
ANTHROPIC_AUTH_TOKEN. Backed by the Anthropic fake (through the passthrough: the run
includes a tool-use turn, Claude Code reading a file) and by the emulator (translated
to a self-hosted OpenAI-compatible server). The ledger shows the spend under the key.

Claude Code is installed with npm into `tests/e2e/.claude-code/` (git-ignored by its
own .gitignore) on first use; the test is skipped, saying why, where npm is absent or
the install fails (no registry access). Every run is bounded by a timeout.

Two Claude Code runs take about a minute on a loaded 2-core machine, beyond what
`make test` may spend: they run with `make test-claude-code` (GATEWAY_TEST_CLAUDE_CODE=1)
and are skipped, saying so, otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from anthropic import types as at

from tests.e2e.anthropic_support import (
    ANTHROPIC_KEY,
    CLIENT_KEY,
    GEMINI_KEY,
    gateway_config,
    gateway_policy,
)
from tests.e2e.support import ledger_records, wait_for
from tests.emulator.emulator_process import emulator_thread
from tests.fakes import Received, Reply
from tests.fakes.anthropic_server import AnthropicFake, make_message, text_message
from tests.fakes.gemini_server import GeminiFake
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

INSTALL_DIR = Path(__file__).resolve().parent / ".claude-code"
CLAUDE = INSTALL_DIR / "node_modules" / ".bin" / "claude"
INSTALL_SECONDS = 240
RUN_SECONDS = 150
SECRET_LINE = "the gateway meters every token"


pytestmark = pytest.mark.skipif(
    os.environ.get("GATEWAY_TEST_CLAUDE_CODE") != "1",
    reason="Claude Code end-to-end runs take ~1 min: run them with `make test-claude-code`",
)


def install_claude_code() -> Path:
    if CLAUDE.exists():
        return CLAUDE
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: Claude Code cannot be installed for this test")
    INSTALL_DIR.mkdir(exist_ok=True)
    (INSTALL_DIR / ".gitignore").write_text("*\n")
    try:
        done = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(INSTALL_DIR),
                "@anthropic-ai/claude-code",
            ],
            capture_output=True,
            timeout=INSTALL_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install @anthropic-ai/claude-code took over {INSTALL_SECONDS}s")
    if done.returncode != 0 or not CLAUDE.exists():
        tail = done.stderr.decode(errors="replace")[-400:]
        pytest.skip(f"npm install @anthropic-ai/claude-code failed: {tail}")
    return CLAUDE


class CodingFake(AnthropicFake):
    """Answers as a model driving Claude Code would: the main turn (a request with
    Claude Code's tools) asks to Read the file the prompt names; once the tool result
    is back, it answers with what the file said. Other requests (titles, summaries)
    get the fake's echo."""

    def __init__(self, api_key: str, file_path: str) -> None:
        super().__init__(api_key)
        self.file_path = file_path

    def respond(self, request: Received) -> Reply:
        if request.path == "/v1/messages" and not self.script:
            try:
                body = json.loads(request.body)
            except ValueError:
                body = {}
            tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
            if "Read" in tools:
                self.enqueue_message(self._next_turn(body["messages"]))
        return super().respond(request)

    def _next_turn(self, messages: list[dict[str, Any]]) -> at.Message:
        last = messages[-1]["content"]
        results = [
            b for b in (last if isinstance(last, list) else []) if b.get("type") == "tool_result"
        ]
        if results:
            said = json.dumps(results[-1].get("content"))
            answer = "The file says: " + (SECRET_LINE if SECRET_LINE in said else "nothing")
            return text_message(answer, input_tokens=900, output_tokens=12)
        use = at.ToolUseBlock(
            type="tool_use", id="toolu_01Read", name="Read", input={"file_path": self.file_path}
        )
        usage = at.Usage(input_tokens=800, output_tokens=20)
        return make_message([use], stop_reason="tool_use", usage=usage)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="claude-code-e2e-"))
    (path / "notes.txt").write_text(SECRET_LINE + "\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def claude_gateway(
    workdir: Path, redis_server: RedisServer
) -> Iterator[tuple[GatewayProcess, CodingFake]]:
    claude_bin = install_claude_code()
    assert claude_bin.exists()
    with (
        CodingFake(ANTHROPIC_KEY, str(workdir / "notes.txt")) as fake,
        GeminiFake(api_key=GEMINI_KEY) as gemini,
        OpenAIFake() as gpt,
        emulator_thread(time_scale=0.0, max_output_tokens=24) as emulator,
    ):
        config = gateway_config(
            redis_server.url, fake.base_url, gemini.base_url, gpt.base_url, emulator.base_url
        )
        with GatewayProcess(config, gateway_policy()) as gateway:
            yield gateway, fake


def run_claude(gateway: GatewayProcess, workdir: Path, model: str, prompt: str) -> dict[str, Any]:
    home = workdir / f"home-{model}"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway.url,
        "ANTHROPIC_AUTH_TOKEN": CLIENT_KEY,
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
    try:
        done = subprocess.run(
            [
                str(CLAUDE),
                "-p",
                prompt,
                "--output-format",
                "json",
                "--model",
                model,
                "--allowedTools",
                "Read",
                "--max-turns",
                "4",
            ],
            cwd=workdir,
            env=env,
            capture_output=True,
            timeout=RUN_SECONDS,
            check=False,
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


def spend_of(redis_url: str, request_ids: set[str]) -> list[Any]:
    return [r for r in ledger_records(redis_url) if r.request_id in request_ids]


def test_claude_code_completes_a_tool_use_turn_through_the_passthrough(
    claude_gateway: tuple[GatewayProcess, CodingFake], workdir: Path, redis_server: RedisServer
) -> None:
    gateway, fake = claude_gateway
    before = {r.request_id for r in ledger_records(redis_server.url)}
    result = run_claude(
        gateway, workdir, "claude-sonnet-4-5", "Read notes.txt and tell me what it says."
    )
    assert result.get("is_error") is False, result
    assert SECRET_LINE in result["result"], result
    # the tool result reached the model through the gateway
    turns = [json.loads(r.body) for r in fake.requests if r.path == "/v1/messages"]
    assert any(
        b.get("type") == "tool_result"
        for t in turns
        for b in (
            t["messages"][-1]["content"] if isinstance(t["messages"][-1]["content"], list) else []
        )
    )

    def records() -> list[Any]:
        return [
            r
            for r in ledger_records(redis_server.url)
            if r.request_id not in before and r.key_id == "claude-code"
        ]

    assert wait_for(lambda: len(records()) >= 2, 10)
    spent = sum(Decimal(r.cost_usd) for r in records())
    assert spent > 0
    assert {r.model for r in records()} == {"claude-sonnet-4-5"}


def test_claude_code_runs_against_a_self_hosted_model_through_translation(
    claude_gateway: tuple[GatewayProcess, CodingFake], workdir: Path, redis_server: RedisServer
) -> None:
    gateway, _ = claude_gateway
    before = {r.request_id for r in ledger_records(redis_server.url)}
    result = run_claude(gateway, workdir, "llama-3.1-8b", "Say hello.")
    assert result.get("is_error") is False, result
    assert result["result"].strip()

    def records() -> list[Any]:
        return [
            r
            for r in ledger_records(redis_server.url)
            if r.request_id not in before and r.key_id == "claude-code"
        ]

    assert wait_for(lambda: len(records()) >= 1, 10)
    assert {r.provider for r in records()} == {"sglang"}
    assert sum(Decimal(r.cost_usd) for r in records()) > 0
