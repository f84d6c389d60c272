"""The interpreter's build, read at start: `gateway serve` names a build it runs slowly on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.interpreter import InterpreterBuild, interpreter_build, slow_interpreter_warning
from gateway.cli.serve import report_interpreter

REPO = Path(__file__).resolve().parents[2]
# tools/pick_python.sh's, in its order
CANDIDATES = (
    "python3",
    "python3.13",
    "python3.12",
    "python3.11",
    "/usr/bin/python3",
    "/usr/local/bin/python3",
)

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


def test_fast_exits_1_on_the_slow_kind_only() -> None:
    done = subprocess.run(
        [sys.executable, "gateway/cli/interpreter.py", "--fast"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == (1 if interpreter_build().slow else 0), done.stderr
    assert done.stdout.startswith("Python ")


def _exits_0(*command: str) -> bool:
    return subprocess.run(command, capture_output=True, cwd=REPO).returncode == 0


def _usable(python: str) -> bool:
    """Python 3.11+ that can make a venv (what the picker asks of a candidate)."""
    check = "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))"
    return _exits_0(python, "-c", check)


def _fast(python: str) -> bool:
    return _exits_0(python, "gateway/cli/interpreter.py", "--fast")


def test_make_picks_a_fast_interpreter_where_this_machine_has_one() -> None:
    """tools/pick_python.sh, which the Makefile makes .venv with."""
    picked = subprocess.run(
        ["sh", "tools/pick_python.sh"], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.strip()
    assert _usable(picked), picked
    if not _fast(picked):
        # slow only when no candidate here is fast (and able to make a venv)
        for candidate in CANDIDATES:
            path = shutil.which(candidate)
            if path is not None:
                assert not (_usable(path) and _fast(path)), (picked, path)
