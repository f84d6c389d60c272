"""`explain` and `gateway route --explain`: the candidate table for a request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.errors import InvalidRequest, NotFound
from gateway.routing.explain import explain
from tests.routing.support import NOON, build_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY = build_policy(
    tenants={"acme": {"allow_overrides": True}},
    rules=[{"name": "no-wide", "when": {"tenant": "acme"}, "then": {"exclude_models": ["wide"]}}],
)


def body(**fields: object) -> bytes:
    request = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], **fields}
    return json.dumps(request).encode()


def test_explain_lists_kept_candidates_in_order_then_dropped_with_reasons() -> None:
    text = explain(POLICY, body(), "acme", "k1", NOON)
    lines = text.splitlines()
    assert "route:    auto  strategy=cheapest  task_class=general  min_quality=0.8" in text
    assert "rules:    no-wide" in text
    assert "header:   x-gateway-route: auto; reason=cheapest-meeting-0.8" in text
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["#", "model", "deployment", "expected", "$", "quality", "decision"]
    rows = [line.split(maxsplit=5) for line in table[1:]]
    assert [(r[0], r[1]) for r in rows] == [
        ("1", "mid"),
        ("2", "premium"),
        ("3", "premium"),
        ("-", "cheap"),
        ("-", "wide"),
    ]
    assert rows[0][5].startswith("kept: cheapest: $")
    assert rows[3][5] == "dropped: quality 0.60 below floor 0.8 for general"
    assert rows[4][5] == "dropped: excluded by rule no-wide"
    assert rows[0][2] == "midco/mid-1"
    assert rows[0][4] == "0.82"


def test_explain_shows_override_headers_at_work() -> None:
    text = explain(POLICY, body(), "acme", None, NOON, headers={"x-gateway-route": "best"})
    assert "route:    best  strategy=quality" in text


def test_explain_unknown_tenant_is_an_error() -> None:
    with pytest.raises(NotFound, match="unknown tenant 'nobody'"):
        explain(POLICY, body(), "nobody", None, NOON)


def test_explain_rejects_a_body_that_is_not_a_chat_request() -> None:
    with pytest.raises(InvalidRequest, match="not a valid chat completion request"):
        explain(POLICY, b'{"model": "auto"}', None, None, NOON)


CONFIG = """
providers:
  openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  anthropic: {kind: anthropic, base_url: "http://127.0.0.1:1"}
  gemini: {kind: gemini, base_url: "http://127.0.0.1:1"}
  deepseek: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  sglang: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
policies: [%s, %s]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    models, routes = ROOT / "policies" / "models.yaml", ROOT / "policies" / "routes.yaml"
    path.write_text(CONFIG % (models, routes), encoding="utf-8")
    return path


def test_route_command_prints_the_table_for_the_shipped_policy(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = tmp_path / "request.json"
    request.write_bytes(body(tools=[{"type": "function", "function": {"name": "f"}}]))
    code = main(
        ["route", "--config", str(config), "--explain", str(request), "--at", "2026-03-02T12:00"]
    )
    out = capsys.readouterr().out
    assert code == 0
    first_row = next(line for line in out.splitlines() if line.startswith("1 "))
    assert first_row.split()[1] == "deepseek-v3.2"
    assert "dropped: excluded by rule tools-need-a-large-model" in out


def test_route_command_exits_1_with_the_error_message(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = tmp_path / "request.json"
    request.write_bytes(body(model="gpt-9"))
    code = main(["route", "--config", str(config), "--explain", str(request)])
    assert code == 1
    assert "The model 'gpt-9' does not exist" in capsys.readouterr().err


def test_route_command_reports_a_missing_request_file(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["route", "--config", str(config), "--explain", str(tmp_path / "none.json")])
    assert code == 1
    assert "cannot read" in capsys.readouterr().err
