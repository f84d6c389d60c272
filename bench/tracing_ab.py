"""What tracing costs per request, off and on, measured in alternation on a busy machine.

    .venv/bin/python bench/tracing_ab.py --baseline /path/to/main-checkout [--rounds 5]
        [--duration 4] [--scenarios "non-stream, 16 in flight|32-chunk stream, 16 in flight"]

Three lean gateways (in-memory store) run side by side, one worker each on the proxy's
core, and take the load in turn, round after round, in a rotating order (this VM's speed
drifts by 10-50% over minutes: rows measured minutes apart do not compare, rows of one
round do):

- baseline  the gateway from `--baseline` (a checkout without tracing), same venv
- off       this checkout, no OTEL_* variables: tracing off
- on        this checkout, tracing on, every request sampled, OTLP/HTTP to a local
            collector (bench/otlp_sink.py, on the load generator's core)

The table gives each round's CPU per request (the gateway process's user + system time,
its export thread included, over the requests served) and the median of the per-round
differences `off - baseline` (what tracing costs when off: it should be noise around 0)
and `on - off` (what it costs when on).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.overhead import FULL_SCENARIO, LOAD_CORE, PROXY_CORE, Row, Scenario, measure_once
from bench.processes import (
    Service,
    free_port,
    gateway,
    otlp_sink,
    spans_received,
    traced_env,
    upstream,
)

SCENARIOS = {
    FULL_SCENARIO: Scenario(FULL_SCENARIO, "instant", False, 16),
    "32-chunk stream, 16 in flight": Scenario("32-chunk stream, 16 in flight", "instant", True, 16),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--scenarios", default=FULL_SCENARIO)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {LOAD_CORE})
    ports = {"instant": free_port()}
    sink_port = free_port()
    services: list[Service] = [
        upstream(ports["instant"], LOAD_CORE, "--chunks", "32").start(),
        otlp_sink(sink_port, LOAD_CORE).start(),
    ]
    gateways: dict[str, tuple[Service, int]] = {}
    try:
        for name, source, env in (
            ("baseline", args.baseline, None),
            ("off", None, None),
            ("on", None, traced_env(sink_port)),
        ):
            port = free_port()
            # one policy for all three (the baseline's default leaves out the route rows')
            service = gateway(
                port, ports, PROXY_CORE, source=source, env=env, extra_models=False
            ).start()
            services.append(service)
            gateways[name] = (service, port)
        for wanted in args.scenarios.split("|"):
            run_rounds(SCENARIOS[wanted], gateways, args.rounds, args.duration, sink_port)
    finally:
        for service in reversed(services):
            service.stop()


def run_rounds(
    scenario: Scenario,
    gateways: dict[str, tuple[Service, int]],
    rounds: int,
    duration: float,
    sink_port: int,
) -> None:
    names = list(gateways)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    errors = 0
    spans_before = spans_received(sink_port)
    on_served = 0
    for number in range(rounds):
        order = names[number % len(names) :] + names[: number % len(names)]
        for name in order:
            service, port = gateways[name]
            row: Row = measure_once(f"gateway-{name}", service, scenario, port, duration)
            assert row.cpu_us is not None
            cpu[name].append(row.cpu_us)
            rates[name].append(row.result.rate)
            errors += row.result.errors
            if name == "on":
                on_served += row.result.count + row.result.errors + row.result.warmup
    time.sleep(0.6)  # the exporter's last 200 ms batch
    spans = spans_received(sink_port) - spans_before
    print(f"\n{scenario.name}: {rounds} rounds of {duration:g} s, {errors} errors")
    print(f"{'round':>5}  " + "  ".join(f"{n + ' us/req':>14}" for n in names))
    for number in range(rounds):
        print(f"{number + 1:>5}  " + "  ".join(f"{cpu[n][number]:>14.1f}" for n in names))
    print(f"{'median':>5}  " + "  ".join(f"{statistics.median(cpu[n]):>14.1f}" for n in names))
    print(f"{'req/s':>5}  " + "  ".join(f"{statistics.median(rates[n]):>14.0f}" for n in names))
    off_cost = [o - b for o, b in zip(cpu["off"], cpu["baseline"], strict=True)]
    on_cost = [o - f for o, f in zip(cpu["on"], cpu["off"], strict=True)]
    print(
        f"off - baseline: median {statistics.median(off_cost):+.1f} us/request "
        f"(rounds: {', '.join(f'{d:+.1f}' for d in off_cost)})"
    )
    print(
        f"on - off:       median {statistics.median(on_cost):+.1f} us/request "
        f"(rounds: {', '.join(f'{d:+.1f}' for d in on_cost)})"
    )
    print(f"spans exported per traced request: {spans / max(1, on_served):.2f}")


if __name__ == "__main__":
    main()
