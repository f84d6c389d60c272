"""Which of the four markers a test gets, decided from what its code reaches.

    unit         in-process only: nothing listens on a port, nothing is started
    integration  real servers of 127.0.0.1: a redis-server, a fake provider, a socket
    e2e          a process of ours (`gateway serve`, `gateway dev`, the emulator, the CLI
                 through `subprocess`), or a tool such as Prometheus or Docker
    clients      third-party clients against `gateway dev` (everything in tests/clients)

tests/conftest.py applies them at collection. A test's mark is the heaviest thing its
code can reach: the test function, the fixtures it uses and, transitively, every function
and class of tests/ they name (gateway/ code is not followed: it only runs in-process).
A test (or module, with `pytestmark`) that carries one of the four itself keeps it.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

MARKERS = {
    "unit": "in-process only (no port, no process); `make test-fast` runs these",
    "integration": "real servers on 127.0.0.1: redis-server, fakes, sockets (`make test-fast`)",
    "e2e": "a process of ours (gateway serve/dev, emulator, CLI) or an external tool",
    "clients": "third-party clients against `gateway dev` (tests/clients)",
}

UNIT, INTEGRATION, E2E = 0, 1, 2
LEVEL_NAMES = ("unit", "integration", "e2e")

# what marks a test, by the module that defines the thing its code names
E2E_MODULES = ("subprocess",)
E2E_NAMES = {
    ("tests.support.gateway_process", "GatewayProcess"),
    ("tests.support.dev_gateway", "DevGateway"),
    ("tests.support.dev_gateway", "dev_gateway"),
}
INTEGRATION_MODULES = ("socket", "http.server", "redis", "uvicorn", "aiohttp.web")
INTEGRATION_NAMES = {
    ("tests.support.redis_server", "RedisServer"),
    ("tests.fakes.server_thread", "ServerThread"),
}
CLIENT_FOLDERS = ("clients",)


def _home(value: Any) -> tuple[str, str]:
    """(defining module, name) of a module, class or function; ("", "") otherwise."""
    if isinstance(value, types.ModuleType):
        return value.__name__, ""
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", "")
    return (module, name) if isinstance(module, str) else ("", "")


def _within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


class Reach:
    """Walks code and remembers what each function or class reaches (one per session)."""

    def __init__(self) -> None:
        self._levels: dict[int, int] = {}
        self._walking: set[int] = set()

    def level(self, value: Any) -> int:
        value = inspect.unwrap(value) if callable(value) else value
        module, name = _home(value)
        if (module, name) in E2E_NAMES or _within(module, E2E_MODULES):
            return E2E
        if (module, name) in INTEGRATION_NAMES or _within(module, INTEGRATION_MODULES):
            return INTEGRATION
        if not module.startswith("tests"):
            return UNIT
        key = id(value)
        if key in self._levels:
            return self._levels[key]
        if key in self._walking:
            return UNIT  # a cycle: its other members are being walked already
        self._walking.add(key)
        try:
            found = max((self.level(part) for part in _parts(value)), default=UNIT)
        finally:
            self._walking.discard(key)
        self._levels[key] = found
        return found


def _parts(value: Any) -> Iterable[Any]:
    """What a function's code names, a class's methods and bases, a module's names."""
    if isinstance(value, type):
        yield from value.__mro__[1:]
        for member in vars(value).values():
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType):
                yield member
        return
    if not isinstance(value, (types.FunctionType, types.ModuleType)):
        yield type(value)  # an instance of a class of tests/ (a module-level fake)
        return
    if isinstance(value, types.FunctionType):
        scope = value.__globals__
        names = set(_names(value.__code__))
        for name in names:
            if name not in scope:
                continue
            found = scope[name]
            yield found
            if isinstance(found, types.ModuleType) and found.__name__.startswith("tests"):
                # `support.start_all(...)`: the attributes this code reads of the module
                yield from (getattr(found, attr) for attr in names if hasattr(found, attr))


def _names(code: types.CodeType) -> Iterable[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def level_of(item: pytest.Item, reach: Reach) -> int:
    function = getattr(item, "obj", None)
    found = reach.level(function) if function is not None else UNIT
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of the fixtures used
    if info is not None:
        for name in item.fixturenames:  # type: ignore[attr-defined]
            for definition in info.name2fixturedefs.get(name, ()):
                found = max(found, reach.level(definition.func))
    return found


def apply_markers(items: list[pytest.Item], tests_root: Path) -> None:
    reach = Reach()
    for item in items:
        if any(item.get_closest_marker(name) for name in MARKERS):
            continue
        path = Path(str(item.path))
        if path.is_relative_to(tests_root) and path.relative_to(tests_root).parts[0] in (
            CLIENT_FOLDERS
        ):
            item.add_marker("clients")
            continue
        item.add_marker(LEVEL_NAMES[level_of(item, reach)])
