"""The shape the design promises, checked on the source: every room imports only what
../shared/DESIGN.md's room table lets it (a breach fails CI), the import graph has no
cycle, the HTTP layer hands requests to the pipeline and knows nothing else, and only
the pipeline writes to a request's Flow."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gateway"

# DESIGN's leaf modules: the one error tree, usage, token counting, wire types
NAMED_LEAVES = ("gateway.errors", "gateway.usage", "gateway.tokens", "gateway.wire")
# small top-level helpers that import at most the named leaves, so any room may use them:
# the Authorization header, a JSON body with clear errors, secret redaction, names in
# Redis keys, RESP packing
HELPER_LEAVES = (
    "gateway.authorization",
    "gateway.json_body",
    "gateway.redaction",
    "gateway.redis_names",
    "gateway.redis_resp",
)
LEAVES = NAMED_LEAVES + HELPER_LEAVES
EVERYTHING_BUT_TRAINING = (
    *LEAVES,
    "gateway.settings",
    "gateway.ingress",
    "gateway.routing",
    "gateway.providers",
    "gateway.limits",
    "gateway.metering",
    "gateway.resilience",
    "gateway.pools",
    "gateway.state",
    "gateway.cache",
    "gateway.admin",
    "gateway.evaluation",
    "gateway.observability",
)

# room -> what it may import besides itself: DESIGN.md's "may import" column
ROOMS: dict[str, tuple[str, ...]] = {
    "gateway.errors": (),
    "gateway.usage": (),
    "gateway.tokens": ("gateway.wire",),
    "gateway.wire": (),
    **{helper: NAMED_LEAVES for helper in HELPER_LEAVES},
    "gateway.settings": LEAVES,
    "gateway.ingress": (*LEAVES, "gateway.settings"),
    "gateway.routing": (*LEAVES, "gateway.settings"),
    "gateway.providers": (*LEAVES, "gateway.settings"),
    "gateway.limits": (*LEAVES, "gateway.settings"),
    "gateway.metering": (*LEAVES, "gateway.settings", "gateway.limits"),
    "gateway.resilience": LEAVES,
    "gateway.pools": (
        *LEAVES,
        "gateway.settings",
        "gateway.routing.balancing",
        # the transport seam: the client it picks and the contract (ProviderClient,
        # UpstreamRequest) every client keeps
        "gateway.providers.transport",
        "gateway.providers.base",
        "gateway.resilience",
    ),
    "gateway.state": (*LEAVES, "gateway.settings"),
    "gateway.cache": (*LEAVES, "gateway.settings", "gateway.state"),
    "gateway.admin": (*LEAVES, "gateway.settings", "gateway.state", "gateway.metering"),
    "gateway.evaluation": (*LEAVES, "gateway.settings", "gateway.routing"),
    "gateway.training": (*LEAVES, "gateway.settings", "gateway.routing"),
    "gateway.observability": LEAVES,
    "gateway.pipeline": EVERYTHING_BUT_TRAINING,
    # settings: the app factory loads the config files and the connection caps are typed
    # by settings.server
    "gateway.api": ("gateway.pipeline", "gateway.admin", "gateway.settings", *LEAVES),
    "gateway.emulator": LEAVES,
    "gateway.cli": ("gateway",),
}
# list/dict methods that change the Flow's fields in place
MUTATING = {"append", "extend", "update", "clear", "pop", "insert", "remove", "setdefault"}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the checks of this file (each walks the
    whole package; parsing it again was most of their time)."""
    return ast.parse(path.read_text())


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def room_of(name: str) -> str | None:
    """The room a module belongs to: the longest row of the table it is inside."""
    rows = [room for room in ROOMS if within(name, room)]
    return max(rows, key=len) if rows else None


def imports_in(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every absolute import in `tree`, wherever it is (module
    level, inside functions, under TYPE_CHECKING): (line, dotted name). `from a import b`
    names `a.b`, so a row can allow one module of a room."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def breaches(root: Path) -> list[str]:
    """Each import under `root/gateway` that its room's row does not allow, and each
    module that is in no room."""
    found = []
    for path in modules(root / "gateway"):
        name = module_name(path, root)
        if name == "gateway":
            continue
        room = room_of(name)
        if room is None:
            found.append(f"{name} is in no room of the table")
            continue
        allowed = (room, *ROOMS[room])
        for line, imported in imports_in(parsed(path)):
            if within(imported, "gateway") and not any(within(imported, a) for a in allowed):
                found.append(f"{name}:{line} ({room}) imports {imported}")
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: module level, inside top-level
    `if`/`try` blocks, not under `if TYPE_CHECKING:` (never run) nor in functions or
    classes (run later, when called)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and not _type_checking(node):
            yield from _top_level_imports(node.body)
            yield from _top_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level_imports(block)
            for handler in node.handlers:
                yield from _top_level_imports(handler.body)


def import_graph(root: Path, package: str, *, deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `root/package` it imports when it is imported (with
    `deferred`, also those it imports later, in functions or for type checking). `from a
    import b` is an edge to `a.b` when that is a module, else to `a`."""
    paths = {module_name(p, root): p for p in modules(root / package)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = graph.setdefault(name, set())
        tree = parsed(path)
        found = ast.walk(tree) if deferred else _top_level_imports(tree.body)
        for node in found:
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif node.module and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in paths
                    else node.module
                    for alias in node.names
                ]
            else:
                continue
            edges.update(t for t in targets if t in paths and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_room_imports_only_what_the_design_table_allows() -> None:
    assert breaches(REPO) == []


def test_the_room_check_fails_on_a_planted_breach(tmp_path: Path) -> None:
    """A tree with routing importing the pipeline inside a function, a module in no room,
    and an allowed import: the check names the first two and only them."""
    routing = tmp_path / "gateway" / "routing"
    routing.mkdir(parents=True)
    (tmp_path / "gateway" / "__init__.py").write_text("")
    (routing / "__init__.py").write_text("")
    (routing / "sneaky.py").write_text(
        "from gateway.settings.policy import Policy\n\n\n"
        "def plan() -> None:\n    from gateway.pipeline.run import run\n"
    )
    (tmp_path / "gateway" / "misc.py").write_text("")
    assert breaches(tmp_path) == [
        "gateway.misc is in no room of the table",
        "gateway.routing.sneaky:5 (gateway.routing) imports gateway.pipeline.run.run",
    ]


def test_serving_never_imports_training() -> None:
    """Only cli and training itself may import gateway.training (the table says so); and
    what `gateway serve` loads holds neither it nor numpy."""
    import subprocess
    import sys

    probe = (
        "import contextlib, sys, gateway.api.app, gateway.pipeline.runtime; "
        "from gateway.cli.main import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(None):\n"
        "    main(['serve', '--help'])\n"
        "print(sorted(m for m in ('gateway.cli.serve', 'gateway.training', 'numpy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['gateway.cli.serve']"
    importers = {
        module_name(path, REPO)
        for path in modules(PACKAGE)
        if any(within(imported, "gateway.training") for _, imported in imports_in(parsed(path)))
    }
    assert importers and all(
        room_of(name) in ("gateway.cli", "gateway.training") for name in importers
    )


def test_the_gateway_import_graph_has_no_cycle() -> None:
    """Module-level imports: an import inside a function runs when it is called, after
    every module has loaded, and is how a module defers an optional cost (the OTLP
    exporter, numpy); the room table above still checks where it points."""
    assert cycles(import_graph(REPO, "gateway")) == []


@pytest.mark.parametrize("folder", ["bench", "training", "research"])
def test_the_script_folders_import_graphs_have_no_cycle(folder: str) -> None:
    """Scripts defer nothing worth a cycle: an import inside a function counts too."""
    if not (REPO / folder).is_dir():
        pytest.skip(f"no {folder}/ folder")
    assert cycles(import_graph(REPO, folder, deferred=True)) == []


def test_the_cycle_check_finds_a_planted_cycle(tmp_path: Path) -> None:
    """a -> b -> c -> a at module level is found; a function-level import back and a
    TYPE_CHECKING one are not cycles (they do not run at import time)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("import pkg.c\n")
    (package / "c.py").write_text("from pkg.a import thing\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\n\nfrom pkg import a\n\n"
        "if TYPE_CHECKING:\n    from pkg import e\n"
    )
    (package / "e.py").write_text("def f() -> None:\n    from pkg import d\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.c"] == {"pkg.a"}
    assert graph["pkg.d"] == {"pkg.a"}
    assert graph["pkg.e"] == set()
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    # counting deferred imports, d -> e -> d is a cycle as well
    assert cycles(import_graph(tmp_path, "pkg", deferred=True)) == [
        ["pkg.a", "pkg.b", "pkg.c"],
        ["pkg.d", "pkg.e"],
    ]


def test_the_http_layer_imports_only_the_pipeline_and_leaf_modules() -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in modules(PACKAGE / "api")
        for _, name in imports_in(parsed(path))
        if within(name, "gateway")
        and not any(within(name, allowed) for allowed in ("gateway.api", *ROOMS["gateway.api"]))
    ]
    assert offending == []


def _flow_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(parsed(path)):
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
                found.append(
                    f"{path.relative_to(PACKAGE.parent)}:{target.lineno} flow.{target.attr}"
                )
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
