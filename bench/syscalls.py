"""System calls per request in the production gateway (Redis admission and ledger), counted
by strace: a count a busy machine does not blur, for what a change adds in the kernel
(bench/instructions.py counts the user-space side).

    .venv/bin/python bench/syscalls.py [--requests 3000] [--baseline PATH]

One `gateway serve` per checkout (with --baseline, that checkout's too, the same config),
warmed up, then `strace -f -c` attached while a fixed number of non-stream requests (16
in flight, bench/overhead.py's ~2 KB body) go through it; the table gives each system
call's count per request, and the total.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.loadgen import build_request, run_load
from bench.overhead import FULL_SCENARIO, Scenario, request_for
from bench.processes import BENCH_KEY, REPO, Service, free_port, gateway, start_redis, upstream

SCENARIO = Scenario(FULL_SCENARIO, "instant", False, 16)


def load(port: int, requests: int) -> int:
    path, body = request_for(SCENARIO)
    request = build_request("127.0.0.1", port, path, body, {"Authorization": f"Bearer {BENCH_KEY}"})
    result = asyncio.run(
        run_load("127.0.0.1", port, request, SCENARIO.concurrency, 3600, requests, warmup=0)
    )
    if result.errors or set(result.statuses) != {200}:
        raise SystemExit(f"requests failed: {result.statuses}, {result.errors} errors")
    return result.count


def counted(pid: int, port: int, requests: int) -> dict[str, float]:
    """strace's per-call counts while `requests` go through `pid`, per request."""
    out = Path(tempfile.mkdtemp(prefix="gw-strace-")) / "counts.txt"
    tracer = subprocess.Popen(["strace", "-f", "-c", "-o", str(out), "-p", str(pid)])
    time.sleep(1.0)  # attached to every thread before the load starts
    served = load(port, requests)
    time.sleep(0.5)  # the last batch's ledger write, the settlements after 2 ms
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=30)
    calls: dict[str, float] = {}
    for line in out.read_text().splitlines():
        # % time, seconds, usecs/call, calls, [errors,] syscall
        fields = line.split()
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3]) / served
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--baseline", type=Path, help="an earlier checkout to compare against")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("strace is not installed (apt-get install strace)")
    ports = {"instant": free_port()}
    services: list[Service] = [upstream(ports["instant"], None, "--chunks", "32").start()]
    sources = {"this": REPO}
    if args.baseline is not None:
        sources["baseline"] = args.baseline
    results: dict[str, dict[str, float]] = {}
    try:
        for side, source in sources.items():
            redis_port, port = free_port(), free_port()
            services.append(start_redis(redis_port, None))
            proxy = gateway(port, ports, None, redis_port=redis_port, source=source)
            # a loaded machine can take more than the usual 30 s to import and bind
            services.append(proxy.start(timeout=120))
            load(port, 500)  # warm: connections open, first-use paths taken
            results[side] = counted(proxy.pid, port, args.requests)
            proxy.stop()
    finally:
        for service in reversed(services):
            service.stop()
    names = sorted({name for calls in results.values() for name in calls})
    names.sort(key=lambda name: -max(calls.get(name, 0.0) for calls in results.values()))
    print(f"{args.requests} non-stream requests, 16 in flight; system calls per request")
    print(f"{'syscall':16}" + "".join(f"{side:>12}" for side in results))
    for name in names:
        print(f"{name:16}" + "".join(f"{calls.get(name, 0.0):12.3f}" for calls in results.values()))
    print(f"{'total':16}" + "".join(f"{sum(calls.values()):12.3f}" for calls in results.values()))


if __name__ == "__main__":
    main()
