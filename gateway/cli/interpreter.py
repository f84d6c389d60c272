"""Which build of Python the gateway runs on, and whether it is the slow kind.

The same gateway spent 11-28% more CPU a request (by scenario) on a CPython whose
interpreter runs from a shared `libpython` built without `--enable-optimizations` (pyenv's
default build) than on Debian's `python3` (a static, profile-guided build: what the
gateway image runs); python.org's builds are optimized too (docs/performance.md, "The
interpreter"). Every call inside such a libpython goes through the dynamic linker's tables
and none is inlined across functions. `gateway serve` says so at start, the benches name
the build beside their tables (`python -m gateway.cli.interpreter`), and the Makefile
makes `.venv` with a fast one where there is one (tools/pick_python.sh, `--fast`).
"""

from __future__ import annotations

import platform
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

MAPS = Path("/proc/self/maps")


@dataclass(frozen=True)
class InterpreterBuild:
    version: str
    executable: str
    # whether this process runs Python from a shared libpython: None where it cannot be
    # told (no /proc: not Linux)
    shared_libpython: bool | None
    # configured with --enable-optimizations (profile-guided, and with it
    # -fno-semantic-interposition). Debian builds with PGO by its own rules, which its
    # configure arguments do not show; its interpreter is linked statically
    optimized: bool

    @property
    def slow(self) -> bool:
        return self.shared_libpython is True and not self.optimized

    def describe(self) -> str:
        linked = {True: "shared libpython", False: "static", None: "linking unknown"}
        build = "--enable-optimizations" if self.optimized else "no --enable-optimizations"
        return (
            f"Python {self.version} at {self.executable} ({linked[self.shared_libpython]}, {build})"
        )


def interpreter_build(maps: Path = MAPS) -> InterpreterBuild:
    config_args = sysconfig.get_config_var("CONFIG_ARGS") or ""
    return InterpreterBuild(
        version=platform.python_version(),
        executable=sys.executable,
        shared_libpython=_maps_libpython(maps),
        optimized="--enable-optimizations" in config_args,
    )


def _maps_libpython(maps: Path) -> bool | None:
    """Whether a libpython is mapped into this process (the interpreter runs from it)."""
    try:
        text = maps.read_text()
    except OSError:
        return None
    return "/libpython3" in text


def slow_interpreter_warning(build: InterpreterBuild) -> str | None:
    """The line `gateway serve` prints at start on a slow build, else None."""
    if not build.slow:
        return None
    return (
        f"python: {build.describe()}: on this kind of build (pyenv's default) the gateway "
        "spends 11-28% more CPU a request than on a static or profile-guided one such as "
        "Debian's python3 or the gateway image's (docs/performance.md, \"The interpreter\")"
    )


def main(argv: list[str]) -> int:
    """Print this interpreter's build; with `--fast`, exit 1 on the slow kind (the
    Makefile picks the interpreter `.venv` is made with by it, running this file as a
    script: it imports nothing outside the standard library)."""
    build = interpreter_build()
    print(build.describe())
    return 1 if "--fast" in argv and build.slow else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
