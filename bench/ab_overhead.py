"""An alternating A/B of one bench/overhead.py scenario: this checkout's production gateway
against a baseline checkout's, CPU per request, in one run.

    .venv/bin/python bench/ab_overhead.py --baseline PATH [--rounds 6] [--duration 4]
        [--scenario "non-stream, 16 in flight" | "32-chunk stream, 16 in flight" | "one at a time"
        | "50 ms upstream, 256 in flight" | "/v1/responses 32-chunk stream, 16"
        | "messages translated stream, 16"]
        [--python PATH] [--baseline-python PATH]

Both gateways run at once, with the same config and policy, each with its own Redis,
pinned to the proxy core as bench/overhead.py pins them; only the one being measured gets
load. The runs go in ABBA
order round after round, so this VM's speed drifting over minutes (10-50%) falls on both
alike; rows of bench/overhead.py measured minutes apart cannot separate a 1% change. The
table gives every run, then each side's median and the median of the per-round
differences (B minus A within a round).

Both gateways run with PYTHONHASHSEED=0 (unless it is set): with a random seed each
process lays out its dicts and sets its own way, and an A/A run (the same code on both
sides) read +4.2 us a request with every round on the same side; with the seed fixed, one
read -1.5 (+1.3 .. -2.5, and one outlier round).

`--target gateway-lean` compares the lean gateway (the in-memory store, no Redis) instead.
`--python` and `--baseline-python` run a side on another interpreter (a venv's python with
the gateway installed); with `--baseline .` the same code on two builds of Python.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.overhead import LOAD_CORE, PROXY_CORE, Row, Scenario, measure_once
from bench.processes import (
    REPO,
    Service,
    describe_interpreter,
    free_port,
    gateway,
    pinned,
    start_redis,
    upstream,
)

SCENARIOS = {
    "non-stream, 16 in flight": Scenario("non-stream, 16 in flight", "instant", False, 16),
    "32-chunk stream, 16 in flight": Scenario("32-chunk stream, 16 in flight", "instant", True, 16),
    # latency, not CPU, is this one's point: compare the p50 columns
    "one at a time": Scenario("one at a time", "instant", False, 1),
    # many requests waiting at once: timers, pools and the loop's bookkeeping at scale
    "50 ms upstream, 256 in flight": Scenario(
        "50 ms upstream, 256 in flight", "delayed", False, 256
    ),
    # chat chunks translated to Responses events, as Codex and the Agents SDK stream
    "/v1/responses 32-chunk stream, 16": Scenario(
        "/v1/responses 32-chunk stream, 16", "instant", True, 16, api="responses"
    ),
    # chat chunks translated to Anthropic events, as Claude Code streams through a chat model
    "messages translated stream, 16": Scenario(
        "messages translated stream, 16", "instant", True, 16, api="anthropic"
    ),
}


class _Link(Service):
    port = 0


def delayed_link(target: int, delay_ms: float) -> _Link:
    """bench/delayed_link.py in front of the Redis on `target`, on the load core."""
    link = _Link("delayed-link", [], "")
    link.port = free_port()
    command = [
        sys.executable, str(REPO / "bench" / "delayed_link.py"), "--listen", str(link.port),
        "--to", str(target), "--delay-ms", str(delay_ms),
    ]  # fmt: skip
    link.command = pinned(command, LOAD_CORE)
    link.process = subprocess.Popen(link.command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", link.port), timeout=1).close()
            return link
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, required=True, help="the checkout to compare")
    parser.add_argument("--scenario", default="non-stream, 16 in flight", choices=SCENARIOS)
    parser.add_argument("--rounds", type=int, default=6, help="ABBA rounds (4 runs each)")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per run")
    parser.add_argument(
        "--redis-delay-ms",
        type=float,
        default=0.0,
        help="each way, through bench/delayed_link.py (a Redis in another zone)",
    )
    parser.add_argument(
        "--target", default="gateway", choices=("gateway", "gateway-lean"), help="which gateway"
    )
    parser.add_argument("--python", type=Path, help="this side's interpreter (default: this one)")
    parser.add_argument("--baseline-python", type=Path, help="the baseline's interpreter")
    args = parser.parse_args()
    if args.redis_delay_ms and args.target != "gateway":
        parser.error("--redis-delay-ms delays the production gateway's Redis; the lean has none")
    scenario = SCENARIOS[args.scenario]
    pythons = {"this": args.python, "baseline": args.baseline_python}
    ports = {"instant": free_port(), "delayed": free_port()}
    services: list[Service] = [
        upstream(ports["instant"], LOAD_CORE, "--chunks", "32").start(),
        upstream(ports["delayed"], LOAD_CORE, "--delay-ms", "50").start(),
    ]
    sides: dict[str, tuple[Service, int, Service | None]] = {}
    try:
        # this checkout as a `source` too: both get the config a baseline can load
        for side, source in (("this", REPO), ("baseline", args.baseline)):
            port = free_port()
            store: Service | None = None
            redis_port: int | None = None
            if args.target == "gateway":
                redis_port = free_port()
                store = start_redis(redis_port, LOAD_CORE)
                services.append(store)
            if args.redis_delay_ms and redis_port is not None:
                link = delayed_link(redis_port, args.redis_delay_ms)
                services.append(link)
                redis_port = link.port
            proxy = gateway(
                port,
                ports,
                PROXY_CORE,
                redis_port=redis_port,
                source=source,
                python=pythons[side],
                env={"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
            )
            services.append(proxy.start(timeout=120))
            sides[side] = (proxy, port, store)
        runs: dict[str, list[Row]] = {"this": [], "baseline": []}
        differences: list[float] = []
        latency_differences: list[float] = []
        for number in range(args.rounds):
            order = ("this", "baseline", "baseline", "this")
            measured: dict[str, list[float]] = {"this": [], "baseline": []}
            latency: dict[str, list[float]] = {"this": [], "baseline": []}
            for side in order:
                proxy, port, store = sides[side]
                row = measure_once(args.target, proxy, scenario, port, args.duration, store)
                runs[side].append(row)
                assert row.cpu_us is not None
                measured[side].append(row.cpu_us)
                latency[side].append(row.result.percentile(50) * 1000)
                print(
                    f"round {number + 1} {side:9} {row.cpu_us:7.1f} us/request "
                    f"({row.redis_us:.0f} Redis) {row.result.rate:7.0f} req/s "
                    f"p50 {latency[side][-1]:.3f} ms {row.result.errors} errors",
                    flush=True,
                )
            mean = {side: statistics.mean(values) for side, values in measured.items()}
            differences.append(mean["this"] - mean["baseline"])
            p50 = {side: statistics.mean(values) for side, values in latency.items()}
            latency_differences.append(p50["this"] - p50["baseline"])
    finally:
        for service in reversed(services):
            service.stop()
    print()
    print(f"scenario: {scenario.name}, {args.rounds} ABBA rounds of {args.duration:g} s runs")
    for side, python in pythons.items():
        print(f"{side}: {describe_interpreter(python)}")
    print(
        f"{'side':10} {'median us/request':>18} {'of which Redis':>15} {'median req/s':>13}"
        f" {'median p50 ms':>14}"
    )
    for side, rows in runs.items():
        cpu = statistics.median(r.cpu_us or 0.0 for r in rows)
        redis = statistics.median(r.redis_us for r in rows)
        rate = statistics.median(r.result.rate for r in rows)
        median_p50 = statistics.median(r.result.percentile(50) * 1000 for r in rows)
        print(f"{side:10} {cpu:18.1f} {redis:15.1f} {rate:13.0f} {median_p50:14.3f}")
    spread = ", ".join(f"{d:+.1f}" for d in differences)
    print(f"this - baseline per round: median {statistics.median(differences):+.1f} us ({spread})")
    spread = ", ".join(f"{d:+.3f}" for d in latency_differences)
    print(
        f"p50 latency, this - baseline per round: median "
        f"{statistics.median(latency_differences):+.3f} ms ({spread})"
    )


if __name__ == "__main__":
    main()
