"""The shape the design promises, checked on the source: the HTTP layer hands requests to
the pipeline and knows nothing else, and only the pipeline writes to a request's Flow."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gateway"
API_MAY_IMPORT = (
    "gateway.pipeline",
    "gateway.api",
    "gateway.errors",
    "gateway.wire",
    "gateway.usage",
    "gateway.tokens",
    "gateway.settings",
)
# list/dict methods that change the Flow's fields in place
MUTATING = {"append", "extend", "update", "clear", "pop", "insert", "remove", "setdefault"}


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n for n in names if n == "gateway" or n.startswith("gateway.")]


def test_the_http_layer_imports_only_the_pipeline_and_leaf_modules() -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in modules(PACKAGE / "api")
        for name in imported(path)
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in API_MAY_IMPORT)
    ]
    assert offending == []


def _flow_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATING
        ):
            targets = [node.func.value]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "flow"
            ):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} flow.{target.attr}")
    return found


def test_only_the_pipeline_writes_to_a_flow() -> None:
    outside = [p for p in modules(PACKAGE) if PACKAGE / "pipeline" not in p.parents]
    writes = [write for path in outside for write in _flow_writes(path)]
    assert writes == []


def test_the_check_sees_the_pipelines_own_writes() -> None:
    """The scan finds writes where they are (else an empty answer above proves nothing)."""
    inside = [w for p in modules(PACKAGE / "pipeline") for w in _flow_writes(p)]
    assert any("flow.status" in w for w in inside)
    assert any("flow.fallback_from" in w for w in inside)


def test_serving_imports_no_http_client_it_was_not_configured_with() -> None:
    """The default transport is our own: importing the app (GPU pools included) loads
    neither httpx nor aiohttp; each is imported only when a provider is set to it."""
    import subprocess
    import sys

    probe = (
        "import sys, gateway.api.app, gateway.pipeline.runtime, gateway.pools.pool; "
        "print(sorted(m for m in ('httpx', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
