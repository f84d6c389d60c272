"""Who asks the kernel for the process id on the request path: on Python 3.11 every
`asyncio.get_running_loop()` (and what calls it: `current_task()`, `asyncio.timeout()`,
`wait_for`, `sleep`, `ensure_future` without a loop, `Event.wait`, ...) is a `getpid`
system call, as is `os.getpid()` itself. A count a busy machine does not blur.

    .venv/bin/python bench/getpid_callers.py [--requests 2000]

The production gateway (Redis admission, ledger, every feature on; bench/syscalls.py's
setup) runs with a profile hook that counts each call of those C functions by the nearest
`gateway/` frame that led to it; after a warm-up, a fixed number of non-stream requests
(16 in flight) go through, and the table gives each caller's calls per request. Calls made
inside C (a `Future()` built without a loop) are not seen: bench/syscalls.py's getpid
row is the total to hold this table against.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import Service, free_port, gateway, start_redis, upstream
from bench.syscalls import load

# runs inside the gateway process: a profile hook, switched on by SIGUSR1, written out by
# SIGUSR2, then the usual `python -m gateway.cli.main serve ...`
HOOK = r"""
import collections, json, os, runpy, signal, sys, threading
LOOKUPS = {"get_running_loop", "_get_running_loop", "get_event_loop", "_get_event_loop",
           "current_task", "getpid"}
counts = collections.Counter()
state = {"on": False}
def caller(frame):
    first = f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {frame.f_code.co_name}"
    while frame is not None and "/gateway/" not in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return f"(no gateway frame) {first}"
    path = frame.f_code.co_filename.split("/gateway/", 1)[1]
    return f"gateway/{path}:{frame.f_lineno} {frame.f_code.co_name} <- {first}"
def hook(frame, event, arg):
    if event == "c_call" and state["on"] and getattr(arg, "__name__", "") in LOOKUPS:
        counts[f"{arg.__name__} @ {caller(frame)}"] += 1
def start(*_):
    counts.clear()
    state["on"] = True
def dump(*_):
    state["on"] = False
    with open(os.environ["GETPID_COUNTS"], "w") as out:
        json.dump(counts, out)
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, dump)
sys.setprofile(hook)
threading.setprofile(hook)
sys.argv = ["gateway", *sys.argv[1:]]
runpy.run_module("gateway.cli.main", run_name="__main__", alter_sys=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    counts_file = Path(tempfile.mkdtemp(prefix="gw-getpid-")) / "counts.json"
    instant, redis_port, port = free_port(), free_port(), free_port()
    services: list[Service] = [upstream(instant, None, "--chunks", "32").start()]
    try:
        services.append(start_redis(redis_port, None))
        proxy = gateway(port, {"instant": instant}, None, redis_port=redis_port)
        module = proxy.command.index("-m")
        proxy.command[module : module + 2] = ["-c", HOOK]
        proxy.env["GETPID_COUNTS"] = str(counts_file)
        services.append(proxy.start(timeout=120))
        load(port, 500)  # warm: connections open, first-use paths taken
        assert proxy.process is not None
        proxy.process.send_signal(10)  # SIGUSR1: count from here
        time.sleep(0.2)
        served = load(port, args.requests)
        time.sleep(0.5)  # the last batch's ledger write, the settlements after 2 ms
        proxy.process.send_signal(12)  # SIGUSR2: write the counts
        deadline = time.monotonic() + 30
        while not counts_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        counts: dict[str, int] = json.loads(counts_file.read_text())
    finally:
        for service in reversed(services):
            service.stop()
    print(f"{served} non-stream requests, 16 in flight; loop look-ups (getpid) per request")
    print(f"{'per request':>12}  caller")
    for where, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"{count / served:12.3f}  {where}")
    print(f"{sum(counts.values()) / served:12.3f}  total")


if __name__ == "__main__":
    main()
