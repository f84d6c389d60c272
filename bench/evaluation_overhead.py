"""What online evaluation costs the client: the same closed-loop non-stream load through
one gateway (one worker, in-memory store) from a tenant that is not evaluated, and from
tenants evaluated at 5% and 100% of their requests, printed as one table.

    python -m bench.evaluation_overhead [--duration 5] [--concurrency 1 8]

The upstream is bench/upstream.py (it answers every request at once and gives no
verdict: every evaluation still makes its reference call and both judge calls through
the gateway, then is dropped as `no_verdict`, so the work is the same as a real one).
The gateway is pinned to core 0, upstream and load generator to core 1. Latency is the
client's (request sent to last byte); CPU is the gateway's per client request, its
evaluation calls included. Rows run one after another, so a drift of this VM's speed
shows as noise of a few percent.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.loadgen import build_request, run_load
from bench.processes import Service, cpu_seconds, free_port, pinned, upstream

TENANTS = {"off": None, "five-percent": 0.05, "every": 1.0}


def key_for(tenant: str) -> str:
    return f"gw-bench-eval-{tenant}"


def gateway(port: int, upstream_port: int) -> Service:
    folder = Path(tempfile.mkdtemp(prefix="gw-bench-eval-"))
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_format": "json"},
        "store": {"kind": "memory"},
        "providers": {
            "instant": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{upstream_port}/v1",
                "retry": {"max_attempts": 1},
            }
        },
        "evaluation": {"queue_size": 10_000, "workers": 4},
        "policies": ["policy.yaml"],
    }
    model = {
        "deployments": [{"provider": "instant", "upstream_model": "bench-model"}],
        "prices": {"input": 0.28, "output": 0.42},
    }
    tenants: dict[str, Any] = {}
    for name, rate in TENANTS.items():
        digest = hashlib.sha256(key_for(name).encode()).hexdigest()
        tenants[name] = {"keys": [{"id": name, "hash": f"sha256:{digest}"}]}
        if rate is not None:
            tenants[name]["evaluation"] = {"sample_rate": rate, "daily_usd": 1_000_000}
    policy = {
        "models": {"served": model, "reference": model, "judge": model},
        "routes": {
            "evaluated": {
                "models": ["served"],
                "evaluation": {"reference": "reference", "judge": "judge"},
            }
        },
        "tenants": tenants,
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    command = [
        sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(folder / "config.yaml"),
    ]  # fmt: skip
    return Service("gateway", pinned(command, 0), f"http://127.0.0.1:{port}/healthz")


def evaluation_counts(port: int) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line.startswith(
            ("gateway_evaluation_enqueued_total", "gateway_evaluation_dropped_total")
        ):
            name, value = line.rsplit(" ", 1)
            counts[name] = counts.get(name, 0.0) + float(value)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    upstream_port, gateway_port = free_port(), free_port()
    backend = upstream(upstream_port, 1).start()
    proxy = gateway(gateway_port, upstream_port).start(timeout=120)
    body = json.dumps(
        {"model": "evaluated", "messages": [{"role": "user", "content": "Say hello."}]}
    ).encode()
    rows = []
    try:
        for concurrency in args.concurrency:
            for tenant, rate in TENANTS.items():
                request = build_request(
                    "127.0.0.1",
                    gateway_port,
                    "/v1/chat/completions",
                    body,
                    {"authorization": f"Bearer {key_for(tenant)}"},
                )
                before = cpu_seconds(proxy.pid)
                result = asyncio.run(
                    run_load("127.0.0.1", gateway_port, request, concurrency, args.duration)
                )
                # the queue drains after the load: its CPU is the evaluations' cost too
                time.sleep(1.0 if rate else 0.2)
                cpu = cpu_seconds(proxy.pid) - before
                served = result.count + result.warmup
                rows.append(
                    (
                        concurrency,
                        "off" if rate is None else f"{rate:.0%}",
                        result.rate,
                        result.percentile(50) * 1000,
                        result.percentile(99) * 1000,
                        cpu / served * 1e6 if served else float("nan"),
                        result.errors,
                    )
                )
    finally:
        counts = evaluation_counts(gateway_port)
        proxy.stop()
        backend.stop()
    print("| in flight | evaluated | req/s | p50 ms | p99 ms | gateway CPU us/request | errors |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for concurrency, rate, per_second, p50, p99, cpu, errors in rows:
        print(
            f"| {concurrency} | {rate} | {per_second:,.0f} | {p50:.2f} | {p99:.2f} |"
            f" {cpu:,.0f} | {errors} |"
        )
    print("\nevaluation counters at the end:", json.dumps(counts, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
