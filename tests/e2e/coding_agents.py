"""What the coding-agent end-to-end tests share (Claude Code, Codex, the Agents SDK):
one real `gateway serve` in front of strict fakes of the four model families, each
fake answering as a model driving an agent would, and the npm install of the CLIs.

The scripted model is the same on every provider, in each provider's own wire format:
offered the agent's tool (`ScriptedTool.name`), it calls it once; given the tool's
result, it answers with what the result said (`answer_for`); anything else (titles,
summaries) gets a short text. The fakes refuse what their providers refuse (unknown
fields, fields without their beta, DeepSeek's max_tokens above 8,192), so a client
passes only if the gateway sends each provider what it accepts.

The CLIs are installed with npm into build/agents/ (git-ignored) on first use, or by
`make agents` / `.ci/run`; where npm or the registry is missing, their tests report
themselves skipped, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic import types as at

from tests.fakes import Received, Reply
from tests.fakes.anthropic_server import AnthropicFake, make_message, text_message
from tests.fakes.gemini_server import GeminiFake, call_response, text_response
from tests.fakes.openai_server import OpenAIFake
from tests.fakes.openai_server import Reply as OpenAIReply
from tests.support.gateway_process import GatewayProcess, key_hash

ROOT = Path(__file__).resolve().parents[2]
INSTALL_DIR = ROOT / "build" / "agents"
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"}
INSTALL_SECONDS = 300

AGENT_KEY = "gw-coding-agents-key"
ADMIN_KEY = "gw-coding-agents-admin"
ANTHROPIC_KEY = "sk-ant-agents-SECRET-51"
GEMINI_KEY = "AIza-agents-SECRET-18"
SECRET_LINE = "the gateway meters every token"
FAMILIES = ("gpt-4.1", "claude-sonnet-4-5", "gemini-2.5-flash", "deepseek")
# DeepSeek's API refuses a max_tokens above this
DEEPSEEK_MAX_OUTPUT = 8192


def installed_cli(name: str) -> Path:
    """The CLI's executable under build/agents/, installed with npm on first use;
    skips the test (saying why) when that cannot be done."""
    binary = INSTALL_DIR / "node_modules" / ".bin" / name
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip(f"npm/node are not installed: {PACKAGES[name]} cannot be installed")
    INSTALL_DIR.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(INSTALL_DIR)]
    try:
        done = subprocess.run(
            [*command, *PACKAGES.values()],
            capture_output=True,
            timeout=INSTALL_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {PACKAGES[name]} took over {INSTALL_SECONDS}s")
    if done.returncode != 0 or not binary.exists():
        tail = done.stderr.decode(errors="replace")[-400:]
        pytest.skip(f"npm install {PACKAGES[name]} failed: {tail}")
    return binary


@dataclass(frozen=True)
class ScriptedTool:
    """The tool the scripted model calls once, and with what."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Script:
    """The tool every fake's scripted model calls now (a test may change it)."""

    tool: ScriptedTool


def answer_for(result: str) -> str:
    if SECRET_LINE in result:
        return "The file says: " + SECRET_LINE
    return "The tool said: " + result[:300]


def _decision(tool: ScriptedTool, offered: list[str], result: str | None) -> tuple[str, str | None]:
    """("text", answer) or ("call", the tool name as this provider sees it)."""
    if result is not None:
        return "text", answer_for(result)
    called = next((name for name in offered if name.endswith(tool.name)), None)
    if called is None:
        return "text", "hello from the scripted model"
    return "call", called


# -- one scripted model per provider, each in its own wire format ---------------------


class ScriptedAnthropic(AnthropicFake):
    def __init__(self, script: Script) -> None:
        super().__init__(ANTHROPIC_KEY)
        self.script_tool = script

    def respond(self, request: Received) -> Reply:
        if request.path == "/v1/messages" and not self.script:
            try:
                body = json.loads(request.body)
            except ValueError:
                body = {}
            if isinstance(body, dict) and body.get("messages"):
                self.enqueue_message(self._turn(body))
        return super().respond(request)

    def _turn(self, body: dict[str, Any]) -> at.Message:
        offered = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
        last = body["messages"][-1].get("content")
        results = [
            b for b in (last if isinstance(last, list) else []) if b.get("type") == "tool_result"
        ]
        said = json.dumps(results[-1].get("content")) if results else None
        tool = self.script_tool.tool
        kind, value = _decision(tool, offered, said)
        if kind == "text":
            return text_message(str(value), input_tokens=900, output_tokens=12)
        use = at.ToolUseBlock(
            type="tool_use", id="toolu_01Agent", name=str(value), input=tool.arguments
        )
        return make_message(
            [use], stop_reason="tool_use", usage=at.Usage(input_tokens=800, output_tokens=20)
        )


class ScriptedGemini(GeminiFake):
    def __init__(self, script: Script) -> None:
        super().__init__(api_key=GEMINI_KEY)
        self.script_tool = script

    def respond(self, request: Received) -> Reply:
        if request.path.endswith("enerateContent") and not self.script:
            try:
                body = json.loads(request.body)
            except ValueError:
                body = {}
            if isinstance(body, dict) and body.get("contents"):
                self._script_turn(body)
        return super().respond(request)

    def _script_turn(self, body: dict[str, Any]) -> None:
        offered = [
            str(d.get("name"))
            for tool in body.get("tools") or []
            for d in tool.get("functionDeclarations") or []
        ]
        parts = body["contents"][-1].get("parts") or []
        answers = [p["functionResponse"] for p in parts if "functionResponse" in p]
        said = json.dumps(answers[-1].get("response")) if answers else None
        tool = self.script_tool.tool
        kind, value = _decision(tool, offered, said)
        if kind == "text":
            self.enqueue_response(text_response(str(value)))
        else:
            self.enqueue_response(call_response([(str(value), tool.arguments)]))


def scripted_openai(script: Script, **options: Any) -> OpenAIFake:
    def answer(request: dict[str, Any]) -> OpenAIReply | None:
        tool = script.tool
        messages = request.get("messages") or []
        if not messages:
            return None
        offered = [
            str((t.get("function") or {}).get("name"))
            for t in request.get("tools") or []
            if isinstance(t, dict)
        ]
        last = messages[-1]
        said = json.dumps(last.get("content")) if last.get("role") == "tool" else None
        kind, value = _decision(tool, offered, said)
        if kind == "text":
            return OpenAIReply(words=str(value).split())
        arguments = json.dumps(tool.arguments)
        return OpenAIReply(tool_call={"id": "call_agent1", "name": value, "arguments": arguments})

    return OpenAIFake(responder=answer, **options)


# -- the gateway ----------------------------------------------------------------------


@dataclass
class AgentUpstreams:
    script: Script
    openai: OpenAIFake
    anthropic: ScriptedAnthropic
    gemini: ScriptedGemini
    deepseek: OpenAIFake

    def of(self, family: str) -> OpenAIFake | ScriptedAnthropic | ScriptedGemini:
        return {
            "gpt-4.1": self.openai,
            "claude-sonnet-4-5": self.anthropic,
            "gemini-2.5-flash": self.gemini,
            "deepseek": self.deepseek,
        }[family]

    def bodies(self, family: str) -> list[dict[str, Any]]:
        """The JSON bodies the family's fake received (model calls only)."""
        fake = self.of(family)
        if isinstance(fake, OpenAIFake):
            return [r.body for r in fake.requests if r.path.endswith("/chat/completions")]
        return [
            json.loads(r.body)
            for r in fake.requests
            if r.path == "/v1/messages" or r.path.endswith("enerateContent")
        ]


@contextmanager
def agent_upstreams(tool: ScriptedTool) -> Iterator[AgentUpstreams]:
    script = Script(tool)
    with (
        scripted_openai(script) as gpt,
        ScriptedAnthropic(script) as claude,
        ScriptedGemini(script) as gemini,
        scripted_openai(
            script, dialect="deepseek", max_output_tokens=DEEPSEEK_MAX_OUTPUT
        ) as deepseek,
    ):
        yield AgentUpstreams(script, gpt, claude, gemini, deepseek)


def _provider(kind: str, base_url: str, key: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "base_url": base_url,
        "api_key": key,
        "retry": {"max_attempts": 1},
        "timeouts": {"read": 30},
        "breaker": {"failure_threshold": 1000, "min_requests": 1000},
    }


def _model(provider: str, upstream: str, max_output: int, context: int) -> dict[str, Any]:
    return {
        "deployments": [{"provider": provider, "upstream_model": upstream}],
        "prices": {"input": 1.0, "output": 2.0},
        "capabilities": ["tools", "vision", "json_schema", "streaming"],
        "max_output_tokens": max_output,
        "context_window": context,
    }


def agents_gateway(up: AgentUpstreams) -> GatewayProcess:
    config = {
        "server": {
            "max_body_bytes": 4 * 1024 * 1024,
            "shutdown_grace_seconds": 2,
            "admin_key_hash": key_hash(ADMIN_KEY),
        },
        "store": {"kind": "memory"},
        "providers": {
            "openai": _provider("openai", up.openai.base_url, "sk-openai-agents-SECRET"),
            "anthropic": _provider("anthropic", up.anthropic.base_url, ANTHROPIC_KEY),
            "google": _provider("gemini", up.gemini.base_url, GEMINI_KEY),
            "deepseek": _provider("openai", up.deepseek.base_url, "sk-deepseek-agents-SECRET"),
        },
    }
    policy = {
        "models": {
            "gpt-4.1": _model("openai", "gpt-4.1-2025-04-14", 32768, 1_047_576),
            "claude-sonnet-4-5": _model("anthropic", "claude-sonnet-4-5-20250929", 64000, 200_000),
            "gemini-2.5-flash": _model("google", "gemini-2.5-flash", 65536, 1_048_576),
            "deepseek": _model("deepseek", "deepseek-chat", DEEPSEEK_MAX_OUTPUT, 128_000),
        },
        # a route that refuses a max_tokens above its model's maximum output
        "routes": {"deepseek-strict": {"models": ["deepseek"], "max_tokens_over_limit": "refuse"}},
        "tenants": {"coders": {"keys": [{"id": "agent", "hash": key_hash(AGENT_KEY)}]}},
    }
    return GatewayProcess(config, policy)
