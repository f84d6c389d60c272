"""What the gateway adds: the same load straight at the upstream and through the gateway.

    .venv/bin/python bench/overhead.py [--duration 5]

The upstream is the emulator in instant mode (`--time-scale 0`: it answers as fast as it
can). The gateway runs one worker pinned to core 0; the upstream and the load generator
share core 1. Closed-loop load with a ~2 KB chat request. Prints one table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.loadgen import Result, build_request, run_load
from bench.processes import BENCH_KEY, cpu_seconds, emulator, free_port, gateway, rss_bytes

PROMPT = ("You are a helpful assistant that answers questions about routing. " * 30)[:2000]


def chat_body(stream: bool, output_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": "bench-model",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": output_tokens,
            "stream": stream,
        }
    ).encode()


@dataclass
class Scenario:
    name: str
    stream: bool
    concurrency: int
    output_tokens: int


SCENARIOS = [
    Scenario("non-stream, 16 in flight", False, 16, 16),
    Scenario("32-chunk stream, 16 in flight", True, 16, 32),
    Scenario("one at a time", False, 1, 16),
]


def measure(port: int, scenario: Scenario, duration: float, auth: bool) -> Result:
    headers = {"Authorization": f"Bearer {BENCH_KEY}"} if auth else {}
    request = build_request(
        "127.0.0.1",
        port,
        "/v1/chat/completions",
        chat_body(scenario.stream, scenario.output_tokens),
        headers,
    )
    return asyncio.run(run_load("127.0.0.1", port, request, scenario.concurrency, duration))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    args = parser.parse_args()

    upstream_port, gateway_port = free_port(), free_port()
    upstream = emulator(upstream_port, 1, "--time-scale", "0", "--output-tokens", "16:16").start()
    proxy = gateway(gateway_port, upstream_port, 0).start()
    rows: list[tuple[str, str, Result, float | None]] = []
    try:
        for scenario in SCENARIOS:
            direct = measure(upstream_port, scenario, args.duration, auth=False)
            rows.append((scenario.name, "direct", direct, None))
            cpu_before = cpu_seconds(proxy.pid)
            through = measure(gateway_port, scenario, args.duration, auth=True)
            cpu_used = cpu_seconds(proxy.pid) - cpu_before
            per_request = cpu_used / max(1, through.count + through.errors) * 1e6
            rows.append((scenario.name, "gateway", through, per_request))
        rss = rss_bytes(proxy.pid)
    finally:
        proxy.stop()
        upstream.stop()

    print(
        f"{'scenario':32} {'target':8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'errors':>7} {'added p50':>10} {'CPU us/req':>11}"
    )
    direct_p50: dict[str, float] = {}
    for name, target, result, cpu in rows:
        p50, p99 = result.percentile(50) * 1000, result.percentile(99) * 1000
        if target == "direct":
            direct_p50[name] = p50
            added = ""
        else:
            added = f"+{p50 - direct_p50[name]:.2f} ms"
        cpu_text = f"{cpu:.0f}" if cpu is not None else ""
        print(
            f"{name:32} {target:8} {result.rate:9.0f} {p50:8.2f} {p99:8.2f} "
            f"{result.errors:7d} {added:>10} {cpu_text:>11}"
        )
    print(f"gateway RSS after the run: {rss / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
