"""The suite's own run order (tests/support/scheduling.py): longest modules first."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.scheduling import load_durations, module_of, order_longest_first


@dataclass
class Node:
    nodeid: str


def test_module_of_is_the_loadscope_unit() -> None:
    assert module_of("tests/a/test_x.py::test_one[p::q]") == "tests/a/test_x.py::test_one[p"
    assert module_of("tests/a/test_x.py::test_one") == "tests/a/test_x.py"
    assert module_of("tests/a/test_x.py") == "tests/a/test_x.py"


def test_longest_module_first_and_written_order_within() -> None:
    items = [
        Node("short.py::a"),
        Node("long.py::b"),
        Node("short.py::c"),
        Node("long.py::a"),
        Node("new.py::z"),
    ]
    order_longest_first(items, {"short.py": 1.0, "long.py": 30.0, "other.py": 5.0})
    # new.py is unrecorded: it ranks as the median (5.0), between long and short
    assert [item.nodeid for item in items] == [
        "long.py::b",
        "long.py::a",
        "new.py::z",
        "short.py::a",
        "short.py::c",
    ]


def test_no_recorded_durations_keeps_collection_order() -> None:
    items = [Node("b.py::x"), Node("a.py::y")]
    order_longest_first(items, {})
    assert [item.nodeid for item in items] == ["b.py::x", "a.py::y"]


def test_unreadable_durations_file_counts_as_none(tmp_path: Path) -> None:
    assert load_durations(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert load_durations(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text("[1, 2]")
    assert load_durations(tmp_path / "list.json") == {}
    (tmp_path / "mixed.json").write_text('{"a.py": 2, "b.py": "slow"}')
    assert load_durations(tmp_path / "mixed.json") == {"a.py": 2.0}


def test_shipped_durations_name_modules_that_exist() -> None:
    """A renamed or deleted module left in the file would rank nothing; a stale entry is a
    sign `make test-durations` is due."""
    root = Path(__file__).resolve().parents[1]
    recorded = load_durations(root / "tests" / "module_durations.json")
    assert len(recorded) > 100
    missing = [module for module in recorded if not (root / module).is_file()]
    assert missing == []


def test_record_durations_writes_each_module(tmp_path: Path) -> None:
    (tmp_path / "test_quick.py").write_text("def test_a():\n    assert 1\n")
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_b():\n    time.sleep(0.2)\n\ndef test_c():\n    assert 1\n"
    )
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\n"
        "from tests.support.scheduling import DurationRecorder\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(DurationRecorder(Path('durations.json')), 'rec')\n"
    )
    root = Path(__file__).resolve().parents[1]
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={
            "PYTHONPATH": str(root),
            "PATH": "/usr/bin:/bin",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    written = json.loads((tmp_path / "durations.json").read_text())
    assert list(written) == ["test_slow.py", "test_quick.py"]
    assert written["test_slow.py"] >= 0.2
