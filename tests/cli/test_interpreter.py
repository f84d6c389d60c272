"""The interpreter's build, read at start: `gateway serve` names a build it runs slowly on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.interpreter import InterpreterBuild, interpreter_build, slow_interpreter_warning
from gateway.cli.serve import report_interpreter

PYENV_MAPS = (
    "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 "
    "/root/.pyenv/versions/3.11.7/bin/python3.11\n"
    "7f0000000000-7f0000200000 r-xp 00000000 08:01 456 "
    "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0\n"
)
STATIC_MAPS = (
    "55d0c0000000-55d0c0001000 r-xp 00000000 08:01 123 /usr/bin/python3.11\n"
    "7f0000000000-7f0000200000 r-xp 00000000 08:01 789 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
)


def build(shared: bool | None, optimized: bool) -> InterpreterBuild:
    return InterpreterBuild("3.11.7", "/opt/py/bin/python", shared, optimized)


def test_a_mapped_libpython_is_read_as_shared(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(PYENV_MAPS)
    assert interpreter_build(maps).shared_libpython is True
    maps.write_text(STATIC_MAPS)
    assert interpreter_build(maps).shared_libpython is False
    # no /proc (not Linux): unknown, and unknown is never called slow
    unknown = interpreter_build(tmp_path / "absent")
    assert unknown.shared_libpython is None
    assert slow_interpreter_warning(unknown) is None


def test_only_a_shared_build_without_optimizations_is_slow() -> None:
    assert build(shared=True, optimized=False).slow
    assert not build(shared=True, optimized=True).slow  # python.org's images: PGO, LTO
    assert not build(shared=False, optimized=False).slow  # Debian's: static (PGO unseen)
    warning = slow_interpreter_warning(build(shared=True, optimized=False))
    assert warning is not None
    assert "/opt/py/bin/python" in warning
    assert "shared libpython" in warning
    assert "docs/performance.md" in warning
    assert slow_interpreter_warning(build(shared=False, optimized=False)) is None


def test_serve_says_it_on_stderr_and_only_then(capsys: pytest.CaptureFixture[str]) -> None:
    report_interpreter(build(shared=True, optimized=False))
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("python: Python 3.11.7 at /opt/py/bin/python")
    report_interpreter(build(shared=False, optimized=False))
    assert capsys.readouterr() == ("", "")


def test_the_module_describes_the_interpreter_it_runs_on() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli.interpreter"],
        capture_output=True,
        text=True,
        check=True,
    )
    here = interpreter_build()
    assert done.stdout.strip() == here.describe()
    assert done.stdout.startswith(f"Python {here.version} at {sys.executable} (")
    linked = Path("/proc/self/maps").exists()
    assert ("linking unknown" in done.stdout) is not linked
