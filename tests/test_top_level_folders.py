"""bench/ (product benchmarks), training/ (the builds of the shipped weights) and research/
(experiments kept for their findings) as DESIGN.md draws them: the gateway imports none of
them, nothing but research/ imports research/, and their modules import each other in no
circle (function-level imports included)."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("bench", "training", "research")
# what a checkout grows that is not the project's code: environments (.venv, the bench's
# .bench/litellm-venv), caches, and npm's build/agents
NOT_SOURCE = {"build", "node_modules", "__pycache__"}


def project_sources() -> Iterator[Path]:
    """The checkout's own .py files, skipping hidden and build folders without walking them."""
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = sorted(
            name for name in subfolders if not name.startswith(".") and name not in NOT_SOURCE
        )
        yield from (Path(folder) / name for name in sorted(files) if name.endswith(".py"))


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def within(name: str, folder: str) -> bool:
    return name == folder or name.startswith(folder + ".")


def test_the_gateway_imports_none_of_the_three_folders() -> None:
    offending = [
        f"{module_name(path)} imports {name}"
        for path in sorted((REPO / "gateway").rglob("*.py"))
        for name in imports_of(path)
        if any(within(name, folder) for folder in FOLDERS)
    ]
    assert offending == []


def test_only_research_imports_research() -> None:
    outside = [p for p in project_sources() if p.parts[len(REPO.parts)] != "research"]
    offending = [
        f"{module_name(path)} imports {name}"
        for path in outside
        for name in imports_of(path)
        if within(name, "research")
    ]
    assert offending == []


def test_bench_training_and_research_import_each_other_in_no_circle() -> None:
    modules = {
        module_name(path): path for folder in FOLDERS for path in (REPO / folder).rglob("*.py")
    }
    graph = {
        name: {imported for imported in imports_of(path) if imported in modules}
        for name, path in modules.items()
    }
    circles: list[list[str]] = []
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            circles.append([*trail[trail.index(name) :], name])
            return
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert circles == []
    # and the check sees what it must: training's builders import each other
    assert "training.chat_data" in graph["training.chat_words_v1"]
