"""The README's Quickstart, run as written: drift between the README and the CLI fails.

Every fenced `sh` command of the Quickstart (and the `python` snippet) is executed in
order, in a clone-like copy of the repository (the files git tracks, nothing else, with
this checkout's `.venv`), in one shell environment carried from command to command (so
`export PATH=...` holds for the commands after it), with fake provider keys. Each must
exit 0; the servers it starts (`make dev`, `gateway serve`) must print their
"gateway listening on" line, and are stopped before the next server starts. The only
command not run is `make test`: it is this suite.

Ports: the README's 127.0.0.1:8080 becomes a free port in the commands, and the shipped
configs read theirs from GATEWAY_PORT / GATEWAY_EMULATOR_PORT(_2), set to free ports, so
the test never touches a port another process may own. GATEWAY_EMULATOR_TIME_SCALE makes
the emulated GPU 20x faster.

The Commands table is checked against the parser: every synopsis names a real
subcommand and options it accepts, and every subcommand has a row.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli.main import _COMMANDS, build_parser
from tests.cli.readme import (
    Block,
    blocks,
    section,
    shell_commands,
    synopsis_words,
    table_commands,
)
from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
SERVERS = ("make dev", "gateway serve", "gateway dev")
NOT_RUN = {"make test": "it is this test suite"}
LISTENING = "gateway listening on"


class Server:
    """A long-running README command, in its own process group so it and its children
    (make -> gateway dev -> emulators) stop together."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.command = command
        self.output: list[str] = []
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def wait_listening(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(LISTENING in line for line in self.output):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"`{self.command}` never printed {LISTENING!r}:\n{self.text}")

    @property
    def text(self) -> str:
        return "".join(self.output)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="module")
def clone() -> Iterator[Path]:
    stamp = REPO / ".venv" / ".installed-serve"  # what `make dev` installs (Makefile)
    pyproject = REPO / "pyproject.toml"
    if not stamp.exists() or stamp.stat().st_mtime < pyproject.stat().st_mtime:
        pytest.fail("run `make install` first: make would reinstall .venv from the copy")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    root = Path(tempfile.mkdtemp(prefix="gw-readme-"))
    for name in filter(None, tracked.split("\0")):
        source = REPO / name
        if source.is_file():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)  # keeps mtimes: make sees .venv as up to date
    (root / ".venv").symlink_to(REPO / ".venv")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def quickstart_blocks() -> list[Block]:
    return [b for b in blocks(section(README, "Quickstart")) if b.language in ("sh", "python")]


def test_the_quickstart_runs_as_written(clone: Path) -> None:
    gateway_port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and not key.startswith("GATEWAY_")
    }
    env.update(
        GATEWAY_PORT=str(gateway_port),
        GATEWAY_EMULATOR_PORT=str(free_port()),
        GATEWAY_EMULATOR_PORT_2=str(free_port()),
        GATEWAY_EMULATOR_TIME_SCALE="0.05",
        GATEWAY_URL=f"http://127.0.0.1:{gateway_port}",
        GATEWAY_BASE_URL=f"http://127.0.0.1:{gateway_port}/v1",
        # the shell the README's reader has: no venv on PATH until the README says so
        PATH=os.pathsep.join(
            p for p in env_path() if not Path(p).resolve().is_relative_to(REPO.resolve())
        ),
    )
    servers: list[Server] = []
    ran: list[str] = []
    try:
        for block in quickstart_blocks():
            if block.language == "python":
                code = block.text.replace("127.0.0.1:8080", f"127.0.0.1:{gateway_port}")
                done = subprocess.run(
                    [str(clone / ".venv" / "bin" / "python"), "-c", code],
                    cwd=clone,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert done.returncode == 0, f"python snippet failed:\n{done.stderr}"
                ran.append("python snippet")
                continue
            for command in shell_commands(block.text):
                command = command.replace("127.0.0.1:8080", f"127.0.0.1:{gateway_port}")
                words = command.split("#")[0].strip()
                if words in NOT_RUN:
                    continue
                if words.startswith(SERVERS):
                    for running in servers:
                        running.stop()
                    server = Server(command, clone, env)
                    servers.append(server)
                    server.wait_listening()
                    ran.append(words)
                    continue
                env = run_in_shell(command, clone, env)
                ran.append(words)
        serve = next(s for s in servers if s.command.startswith("gateway serve"))
        # the README says so: an unreachable Redis is named (no password) with its cause
        deadline = time.monotonic() + 10
        while "cannot resolve host 'redis'" not in serve.text and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "store: redis at redis://redis:6379/0 is not reachable" in serve.text
        assert "cannot resolve host 'redis'" in serve.text
    finally:
        for running in servers:
            running.stop()
    # the README's own commands ran, not a filtered-down remainder
    assert {"make dev", "gateway --help", "python snippet", "gateway keys new"} <= set(ran)
    assert any(r.startswith("gateway check --config config/production.yaml") for r in ran)


def env_path() -> list[str]:
    return os.environ.get("PATH", "").split(os.pathsep)


def run_in_shell(command: str, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """Run one README command in bash with `env`; return the environment after it (so an
    `export` carries on), failing the test with the command's output if it exits non-zero."""
    dump = Path(tempfile.mkstemp(prefix="gw-readme-env-")[1])
    try:
        done = subprocess.run(
            [
                "bash",
                "-c",
                f'set -o pipefail\n{command}\nstatus=$?\nenv -0 > "{dump}"\nexit $status',
            ],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"README command failed ({done.returncode}): {command}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
        pairs = dump.read_bytes().decode().split("\0")
        return dict(p.split("=", 1) for p in pairs if "=" in p)
    finally:
        dump.unlink(missing_ok=True)


def subparser(path: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in path:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or word not in actions[0].choices:
            if actions:
                return parser
            raise LookupError(word)
        parser = actions[0].choices[word]
    return parser


def test_every_command_in_the_table_exists_with_the_options_it_shows() -> None:
    synopses = table_commands(section(README, "Commands"))
    assert synopses, "the Commands table lists no `gateway ...` command"
    documented: set[str] = set()
    for synopsis in synopses:
        path, options = synopsis_words(synopsis)
        assert path, f"{synopsis!r} names no subcommand"
        documented.add(path[0])
        try:
            parser = subparser(path)
        except LookupError as missing:
            pytest.fail(f"README: {synopsis!r}: `gateway` has no subcommand {missing}")
        for option in options:
            assert option in parser._option_string_actions, (
                f"README: {synopsis!r}: `gateway {' '.join(path)}` has no option {option}"
            )
    assert set(_COMMANDS) <= documented, f"undocumented: {set(_COMMANDS) - documented}"


def test_the_readme_parser_finds_the_quickstart_blocks() -> None:
    # guards the test above against passing on nothing
    found = quickstart_blocks()
    assert [b for b in found if b.language == "sh"] and [b for b in found if b.language == "python"]
    assert any("make dev" in b.text for b in found)
