"""The suite's measure of a busy machine (tests/support/stalls.py): a process stopped by
the operating system counts as stalled; one that only waits does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.stalls import StallWatch

ROOT = Path(__file__).resolve().parents[1]
WATCH_FOR_A_SECOND = (
    "import time\n"
    "from tests.support.stalls import StallWatch\n"
    "with StallWatch() as stalls:\n"
    "    print('watching', flush=True)\n"
    "    time.sleep(1.0)\n"
    "print(stalls.longest)\n"
)


def test_a_process_stopped_by_the_system_is_seen_stalled() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", WATCH_FOR_A_SECOND],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "watching\n"
        time.sleep(0.1)
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.4)
        os.kill(child.pid, signal.SIGCONT)
        longest = float(child.stdout.read())
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.wait(timeout=10)
    assert 0.35 <= longest < 5


@pytest.mark.parametrize("wait", ["sleep", "python"])
def test_waiting_or_running_python_is_not_a_stall(wait: str) -> None:
    with StallWatch() as stalls:
        started = time.monotonic()
        while time.monotonic() - started < 1.0:
            if wait == "sleep":
                time.sleep(1.0)
            else:
                sum(i for i in range(1000))  # bytecode: the GIL changes hands
    # a loaded machine may still deschedule us for a while; a second's wait never counts
    # as one stall
    assert stalls.longest < 0.8
