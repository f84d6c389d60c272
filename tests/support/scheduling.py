"""The order in which pytest-xdist hands modules to workers: the longest first.

`make test` sends whole modules to workers (`--dist loadscope`) in collection order
(`--no-loadscope-reorder`; xdist's own reorder puts the modules with the most tests first,
which put the one-test soak last and left one worker running it while the other sat idle).
Collection order is set here from each module's recorded seconds, longest first: the
classic longest-processing-time rule, which keeps the last minutes of a run busy on both
cores.

The seconds live in tests/module_durations.json, written by `make test-durations`
(`pytest --record-durations PATH`: setup, call and teardown summed per module). A module
missing from the file counts as the median module, so a stale file only costs balance;
it never skips or adds a test.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Protocol, TypeVar

import pytest


class HasNodeId(Protocol):
    @property
    def nodeid(self) -> str: ...


Node = TypeVar("Node", bound=HasNodeId)


def module_of(nodeid: str) -> str:
    """The unit xdist's loadscope schedules: the node id up to its last `::`."""
    return nodeid.rsplit("::", 1)[0]


def load_durations(path: Path) -> dict[str, float]:
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {
        str(module): float(seconds)
        for module, seconds in recorded.items()
        if isinstance(seconds, int | float)
    }


def order_longest_first(items: list[Node], durations: dict[str, float]) -> None:
    """Sort `items` in place by their module's recorded seconds, longest first; a module's
    own tests keep their written order, and ties keep collection order."""
    if not durations:
        return
    typical = statistics.median(durations.values())
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(module_of(item.nodeid), len(first_seen))

    def rank(item: Node) -> tuple[float, int]:
        module = module_of(item.nodeid)
        return (-durations.get(module, typical), first_seen[module])

    items.sort(key=rank)  # stable: within a module, the written order stays


class DurationRecorder:
    """Sums each module's setup, call and teardown seconds from the test reports; with
    xdist the controller receives every worker's reports, so one file covers the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # a worker: the controller writes the file
        ordered = dict(sorted(self.seconds.items(), key=lambda pair: (-pair[1], pair[0])))
        rounded = {module: round(seconds, 2) for module, seconds in ordered.items()}
        self.path.write_text(json.dumps(rounded, indent=1) + "\n")
