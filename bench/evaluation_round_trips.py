"""What online evaluation asks of Redis per client request: the same closed-loop load
through one gateway (one worker, Redis store) from a tenant that is not evaluated, one
opted in but never sampled (rate 0: its requests are only noted for feedback), and one
sampled at 100%, with and without `feedback_metrics` in the policy, printed as one table.

    python -m bench.evaluation_round_trips [--duration 3] [--concurrency 8]

Redis's MONITOR sees every command; the table counts the top-level ones (not those a
script runs) on the evaluation's `{eval}` keys on a request's way out, per client
request: journal records (one script each: entry, delivery and note in one round trip)
and request notes SET in batches (one pipeline per batch: a round trip per batch, not
per note). What the evaluation workers do later (cap reservations, labels, leases) is
counted apart and not printed: it is not on any request's way.
The upstream is bench/upstream.py (instant, no verdict: each evaluation makes its
reference call and both judge calls, then is dropped as `no_verdict`). Rows run one
after another. MONITOR slows Redis: req/s is not a throughput figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
import yaml

from bench.loadgen import UNIQUE_SLOT, build_request, run_load
from bench.processes import Service, free_port, pinned, start_redis, upstream
from gateway.evaluation.journal import _RECORD

TENANTS = {"off": None, "noted only (rate 0)": 0.0, "sampled (rate 1)": 1.0}
RECORD_SHA = hashlib.sha1(_RECORD.encode()).hexdigest()


def key_for(tenant: str) -> str:
    return "gw-bench-rt-" + hashlib.sha256(tenant.encode()).hexdigest()[:8]


def gateway(port: int, upstream_port: int, redis_port: int, feedback: bool) -> Service:
    folder = Path(tempfile.mkdtemp(prefix="gw-bench-rt-"))
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_format": "json", "log_content": True},
        "store": {"kind": "redis", "redis_url": f"redis://127.0.0.1:{redis_port}/0"},
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
        tenants[name] = {"keys": [{"id": key_for(name), "hash": f"sha256:{digest}"}]}
        if rate is not None:
            tenants[name]["evaluation"] = {"sample_rate": rate, "daily_usd": 1_000_000}
    policy: dict[str, Any] = {
        "models": {"served": model, "reference": model, "judge": model},
        "routes": {
            "evaluated": {
                "models": ["served"],
                "evaluation": {"reference": "reference", "judge": "judge"},
            }
        },
        "tenants": tenants,
    }
    if feedback:
        policy["feedback_metrics"] = {"thumbs_up": {"type": "boolean"}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    command = [
        sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(folder / "config.yaml"),
    ]  # fmt: skip
    return Service("gateway", pinned(command, 0), f"http://127.0.0.1:{port}/healthz")


class Commands:
    """Top-level commands on `{eval}` keys, by kind, from Redis's MONITOR."""

    def __init__(self, redis_port: int) -> None:
        self.counts = {"journal": 0, "notes": 0, "workers": 0}
        self._lock = threading.Lock()
        self._client = redis.Redis(port=redis_port, socket_timeout=None)
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        with contextlib.suppress(redis.ConnectionError), self._client.monitor() as monitor:  # type: ignore[no-untyped-call]
            for command in monitor.listen():
                text = str(command.get("command", ""))
                if command.get("client_type") == "lua" or "{eval}" not in text:
                    continue
                kind = (
                    "journal"
                    if RECORD_SHA in text
                    else "notes"
                    if text.startswith("SET") and "{eval}:req:" in text
                    else "workers"
                )
                with self._lock:
                    self.counts[kind] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            counts, self.counts = self.counts, dict.fromkeys(self.counts, 0)
        return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    redis_port, upstream_port = free_port(), free_port()
    store = start_redis(redis_port, 1)
    backend = upstream(upstream_port, 1).start()
    commands = Commands(redis_port)
    rows = []
    try:
        for feedback in (False, True):
            gateway_port = free_port()
            proxy = gateway(gateway_port, upstream_port, redis_port, feedback).start(timeout=120)
            try:
                for tenant in TENANTS:
                    body = json.dumps(
                        {
                            "model": "evaluated",
                            "messages": [
                                {"role": "user", "content": "Say hello " + UNIQUE_SLOT.decode()}
                            ],
                        }
                    ).encode()
                    request = build_request(
                        "127.0.0.1",
                        gateway_port,
                        "/v1/chat/completions",
                        body,
                        {"authorization": f"Bearer {key_for(tenant)}"},
                    )
                    time.sleep(1.0)
                    commands.take()
                    result = asyncio.run(
                        run_load(
                            "127.0.0.1", gateway_port, request, args.concurrency, args.duration
                        )
                    )
                    time.sleep(1.0)  # the evaluation work the row started
                    served = result.count + result.warmup
                    counts = commands.take()
                    rows.append(
                        (
                            "yes" if feedback else "no",
                            tenant,
                            served,
                            result.rate,
                            {k: v / served for k, v in counts.items()},
                        )
                    )
            finally:
                proxy.stop()
    finally:
        backend.stop()
        store.stop()
    print(
        "| feedback_metrics | tenant | requests | req/s (under MONITOR) | journal records / req"
        " | note SETs / req (batched) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for feedback_metrics, tenant, served, per_second, per in rows:
        print(
            f"| {feedback_metrics} | {tenant} | {served} | {per_second:,.0f} |"
            f" {per['journal']:.2f} | {per['notes']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
