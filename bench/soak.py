"""Does memory stay flat? A mixed load at ~70% of the measured maximum for a long time,
with the gateway's RSS, open file descriptors and Redis keys sampled as it runs.

    .venv/bin/python bench/soak.py [--duration 3600] [--load 0.7] [--samples 20]

The gateway runs with every production feature on (Redis admission, the Redis ledger,
metrics, JSON access logs, the response cache and the admin API; bench/processes.py),
one worker pinned to core 0; the upstreams, Redis and this client share core 1. The mix:

- chat, a different prompt every time; chat streams (32 chunks); `/v1/messages`
- response-cache hits (the same request to the `cached` route)
- client disconnects: a stream from an upstream pacing 50 chunks 20 ms apart, dropped
  after its first chunk
- errors: an unknown model (404), a body that is not JSON (400), a wrong key (401), a
  model whose upstream refuses connections (the gateway's 5xx)
- key churn through the admin API, beside the load: a key issued, used once (200),
  revoked, used again (401), once every `--churn-interval` seconds

First a few seconds of the mix at 16 in flight measure the maximum; the soak then paces
requests at `--load` of it. The first `--warmup` part of the run is warm-up (caches fill,
the heap finds its size); after it, RSS may grow at most 5% (the issue's target), and
descriptors and Redis keys must stay bounded. `run_soak` is what the short soak test
(tests/e2e/test_soak_short.py) runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.loadgen import _read_response, build_request
from bench.processes import (
    BENCH_KEY,
    Service,
    free_port,
    gateway,
    memory_bytes,
    process_tree,
    start_redis,
    upstream,
)
from gateway.admin.client_keys import hash_key

PROXY_CORE, LOAD_CORE = 0, 1
ADMIN_KEY = "gw-soak-admin-key"
SYSTEM = "You are a helpful assistant that answers questions about routing. " * 8


def open_fds(pid: int) -> int:
    total = 0
    for one in process_tree(pid):
        try:
            total += len(os.listdir(f"/proc/{one}/fd"))
        except OSError:
            continue
    return total


def redis_info(port: int) -> tuple[int, int]:
    """(keys in db 0, used_memory bytes), by two raw RESP commands."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"DBSIZE\r\nINFO memory\r\n")
        reader = sock.makefile("rb")
        keys = int(reader.readline()[1:])  # :N
        length = int(reader.readline()[1:])  # $len, then the bulk string and CRLF
        info = reader.read(length + 2)
    used = int(info.split(b"used_memory:", 1)[1].split(b"\r\n", 1)[0])
    return keys, used


def redis_keys(port: int) -> tuple[Counter[str], Counter[str]]:
    """Redis's keys by family (the name with digit and hex runs as #), all of them and
    those without a TTL: which kind of key a growing count is, and whether it lapses."""
    families: Counter[str] = Counter()
    persistent: Counter[str] = Counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        reader = sock.makefile("rb")
        cursor = b"0"
        while True:
            sock.sendall(b"SCAN " + cursor + b" COUNT 1000\r\n")
            reader.readline()  # *2
            reader.readline()  # $len of the cursor
            cursor = reader.readline().strip()
            names = []
            for _ in range(int(reader.readline()[1:])):
                reader.readline()
                names.append(reader.readline().strip())
            sock.sendall(b"".join(b"TTL " + name + b"\r\n" for name in names))
            for name in names:
                family = re.sub(r"[0-9a-f]{6,}|\d+", "#", name.decode(errors="replace"))
                families[family] += 1
                if int(reader.readline()[1:]) == -1:
                    persistent[family] += 1
            if cursor == b"0":
                return families, persistent


@dataclass
class Sample:
    at: float  # seconds since the soak began
    requests: int
    rss_mb: float
    fds: int
    redis_keys: int
    redis_mb: float
    persistent_keys: int  # without a TTL


@dataclass
class SoakReport:
    max_rate: float
    target_rate: float
    duration: float
    warmup: float
    samples: list[Sample] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # "kind status" -> count
    failures: Counter[str] = field(default_factory=Counter)  # unexpected outcomes
    churned: int = 0
    key_families: Counter[str] = field(default_factory=Counter)  # at the end
    persistent_families: Counter[str] = field(default_factory=Counter)  # without a TTL

    def after_warmup(self) -> tuple[Sample, list[Sample]]:
        warm = [s for s in self.samples if s.at <= self.warmup]
        later = [s for s in self.samples if s.at > self.warmup]
        return (warm[-1] if warm else self.samples[0]), later

    @property
    def rss_growth(self) -> float:
        """Largest RSS after warm-up over RSS at its end, minus one."""
        start, later = self.after_warmup()
        return max(s.rss_mb for s in later) / start.rss_mb - 1 if later else 0.0

    def growth(self, name: str) -> int:
        start, later = self.after_warmup()
        return max(getattr(s, name) for s in later) - getattr(start, name) if later else 0


def body(model: str, text: str, stream: bool = False) -> bytes:
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            "max_tokens": 64,
            "stream": stream,
        }
    ).encode()


def messages_body(text: str) -> bytes:
    return json.dumps(
        {
            "model": "instant",
            "system": SYSTEM,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 64,
        }
    ).encode()


# kind -> (weight, the statuses it should get)
MIX: dict[str, tuple[int, frozenset[int]]] = {
    "chat": (40, frozenset({200})),
    "stream": (15, frozenset({200})),
    "messages": (10, frozenset({200})),
    "cache hit": (10, frozenset({200})),
    "disconnect": (5, frozenset({200})),
    "unknown model": (5, frozenset({404})),
    "bad json": (5, frozenset({400})),
    "bad key": (5, frozenset({401})),
    "upstream down": (5, frozenset({502, 503, 504})),
}


class Mix:
    """The request for each turn of the mix, on the gateway's port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.turn = 0
        self.kinds = [kind for kind, (weight, _) in MIX.items() for _ in range(weight)]
        # spread each kind through the cycle (a fixed stride through the list)
        self.stride = 37

    def next(self) -> tuple[str, bytes]:
        self.turn += 1
        kind = self.kinds[(self.turn * self.stride) % len(self.kinds)]
        return kind, self.request(kind, self.turn)

    def request(self, kind: str, n: int, key: str = BENCH_KEY) -> bytes:
        auth = {"Authorization": f"Bearer {key}"}
        text = f"Question {n}: how should this request be routed and what will it cost?"
        path, payload = "/v1/chat/completions", body("instant", text)
        if kind == "stream":
            payload = body("instant", text, stream=True)
        elif kind == "messages":
            path, payload = "/v1/messages", messages_body(text)
            auth["anthropic-version"] = "2023-06-01"
        elif kind == "cache hit":
            payload = body("cached", "the same question every time")
        elif kind == "disconnect":
            payload = body("paced", text, stream=True)
        elif kind == "unknown model":
            payload = body("no-such-model", text)
        elif kind == "bad json":
            payload = b'{"model": "instant", "messages": [' + str(n).encode()
        elif kind == "bad key":
            auth = {"Authorization": "Bearer sk-not-a-key"}
        elif kind == "upstream down":
            payload = body("down", text)
        return build_request("127.0.0.1", self.port, path, payload, auth)


Connection = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def exchange(port: int, request: bytes, connection: Connection) -> int:
    """One request on the worker's keep-alive connection (`connection`: empty, or the
    one open; reopened when the server closed it)."""
    for attempt in range(2):
        if not connection:
            connection.append(await asyncio.open_connection("127.0.0.1", port))
        reader, writer = connection[0]
        try:
            writer.write(request)
            status, _ = await _read_response(reader)
            return status
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            connection.clear()
            if attempt:
                raise
    raise AssertionError("unreachable")


async def disconnect(port: int, request: bytes) -> int:
    """A stream dropped after its first chunk: the client leaving mid-answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        if status == 200:
            await reader.readuntil(b"\n\n")
        return status
    finally:
        writer.transport.abort()


async def churn(port: int, mix: Mix, report: SoakReport, n: int) -> None:
    """A key issued, used, revoked, refused: through the admin API, as an operator does."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    conn: Connection = []

    async def admin_call(path: str, payload: dict[str, object]) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                build_request("127.0.0.1", port, path, json.dumps(payload).encode(), admin)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            return int(head[9:12]), await reader.readexactly(length)
        finally:
            writer.close()

    key_id = f"churn-{n}"
    status, answer = await admin_call("/admin/keys", {"tenant": "soak", "id": key_id})
    if status not in (200, 201):
        report.failures[f"admin issue {status}"] += 1
        return
    key = json.loads(answer)["key"]
    used = await exchange(port, mix.request("chat", n, key), conn)
    report.outcomes[f"churned key {used}"] += 1
    status, _ = await admin_call(f"/admin/keys/{key_id}/revoke", {})
    if status != 200:
        report.failures[f"admin revoke {status}"] += 1
    # revocation reaches this replica within a second: ask until refused
    deadline = time.monotonic() + 5
    refused = 0
    while time.monotonic() < deadline:
        refused = await exchange(port, mix.request("chat", n, key), conn)
        if refused == 401:
            break
        await asyncio.sleep(0.1)
    report.outcomes[f"revoked key {refused}"] += 1
    if used != 200 or refused != 401:
        report.failures[f"churned key {used}, revoked {refused}"] += 1
    report.churned += 1
    if conn:
        conn[0][1].close()


async def run_mix(
    port: int, mix: Mix, concurrency: int, until: float, report: SoakReport, rate: float | None
) -> int:
    """The mix from `concurrency` workers until `until`, paced to `rate` per second (None:
    as fast as answered). Returns the requests made."""
    made = 0
    next_slot = time.monotonic()

    async def worker() -> None:
        nonlocal made, next_slot
        connection: Connection = []
        while time.monotonic() < until:
            if rate is not None:
                slot, next_slot = next_slot, max(next_slot, time.monotonic() - 1) + 1 / rate
                delay = slot - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            kind, request = mix.next()
            try:
                if kind == "disconnect":
                    status = await disconnect(port, request)
                else:
                    status = await exchange(port, request, connection)
            except (OSError, asyncio.IncompleteReadError, ValueError) as error:
                report.failures[f"{kind}: {type(error).__name__}"] += 1
                connection.clear()
                continue
            made += 1
            report.outcomes[f"{kind} {status}"] += 1
            if status not in MIX[kind][1]:
                report.failures[f"{kind} {status}"] += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return made


async def soak(
    port: int,
    pid: int,
    redis_port: int,
    duration: float,
    load: float,
    warmup: float,
    samples: int,
    churn_interval: float,
) -> SoakReport:
    mix = Mix(port)
    probe = SoakReport(0, 0, 0, 0)
    started = time.monotonic()
    made = await run_mix(port, mix, 16, started + 3, probe, None)
    max_rate = made / (time.monotonic() - started)
    report = SoakReport(max_rate, max_rate * load, duration, warmup)
    begun = time.monotonic()
    until = begun + duration
    requests = 0

    def sample() -> None:
        keys, used = redis_info(redis_port)
        families, persistent = redis_keys(redis_port)
        report.key_families, report.persistent_families = families, persistent
        report.samples.append(
            Sample(
                time.monotonic() - begun,
                requests,
                memory_bytes(pid) / 1e6,
                open_fds(pid),
                keys,
                used / 1e6,
                sum(persistent.values()),
            )
        )

    async def sampler() -> None:
        nonlocal requests
        every = duration / samples
        while time.monotonic() < until:
            requests = sum(report.outcomes.values())
            sample()
            await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))

    async def churner() -> None:
        n = 0
        while time.monotonic() < until:
            n += 1
            await churn(port, mix, report, n)
            await asyncio.sleep(churn_interval)

    await asyncio.gather(
        run_mix(port, mix, 32, until, report, report.target_rate), sampler(), churner()
    )
    await asyncio.sleep(1)  # the last settlements and ledger batch
    requests = sum(report.outcomes.values())
    sample()
    return report


def start_services(services: list[Service]) -> tuple[Service, int]:
    """The upstreams, Redis and the gateway (admin API on); returns it and Redis's port."""
    instant, paced = free_port(), free_port()
    services.append(upstream(instant, LOAD_CORE, "--chunks", "32").start())
    services.append(
        upstream(paced, LOAD_CORE, "--chunks", "50", "--chunk-interval-ms", "20").start()
    )
    redis_port, port = free_port(), free_port()
    services.append(start_redis(redis_port, LOAD_CORE))
    # "down": a provider on a port nothing listens on (the gateway's connect fails)
    proxy = gateway(
        port, {"instant": instant, "paced": paced, "down": free_port()}, PROXY_CORE,
        redis_port=redis_port,
    )  # fmt: skip
    config_path = Path(proxy.command[proxy.command.index("--config") + 1])
    config = yaml.safe_load(config_path.read_text())
    config["server"]["admin_key_hash"] = hash_key(ADMIN_KEY)
    # the churned keys arrive through Redis: polled as production does
    config_path.write_text(yaml.safe_dump(config))
    services.append(proxy.start(timeout=120))
    return proxy, redis_port


def run_soak(
    duration: float,
    load: float = 0.7,
    warmup: float | None = None,
    samples: int = 20,
    churn_interval: float = 1.0,
) -> SoakReport:
    # the caller's cores come back at the end: a test suite's worker runs on (and its
    # later subprocesses inherit) whatever this process is pinned to
    pin = hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2
    cores = os.sched_getaffinity(0) if pin else set()
    if pin:
        os.sched_setaffinity(0, {LOAD_CORE})
    services: list[Service] = []
    try:
        proxy, redis_port = start_services(services)
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        tenant = build_request(
            "127.0.0.1", _port_of(proxy), "/admin/tenants", b'{"id": "soak"}', admin
        )

        async def main() -> SoakReport:
            reader, writer = await asyncio.open_connection("127.0.0.1", _port_of(proxy))
            writer.write(tenant)
            status, _ = await _read_response(reader)
            writer.close()
            if status not in (200, 201):
                raise RuntimeError(f"creating the soak tenant answered {status}")
            return await soak(
                _port_of(proxy),
                proxy.pid,
                redis_port,
                duration,
                load,
                warmup if warmup is not None else max(10.0, duration * 0.2),
                samples,
                churn_interval,
            )

        return asyncio.run(main())
    finally:
        for service in reversed(services):
            service.stop()
        if pin:
            os.sched_setaffinity(0, cores)


def _port_of(proxy: Service) -> int:
    return int(proxy.health_url.rsplit(":", 1)[1].split("/", 1)[0])


def print_report(report: SoakReport) -> None:
    print(
        f"soak: {report.duration:.0f} s at {report.target_rate:.0f} req/s "
        f"({report.target_rate / report.max_rate:.0%} of the mix's measured "
        f"{report.max_rate:.0f} req/s), warm-up {report.warmup:.0f} s, key churn beside it"
    )
    print(
        f"{'t s':>7} {'requests':>9} {'RSS MB':>8} {'fds':>5} {'Redis keys':>11} "
        f"{'no TTL':>7} {'Redis MB':>9}"
    )
    for s in report.samples:
        print(
            f"{s.at:7.0f} {s.requests:9} {s.rss_mb:8.1f} {s.fds:5} {s.redis_keys:11} "
            f"{s.persistent_keys:7} {s.redis_mb:9.2f}"
        )
    start, _ = report.after_warmup()
    print(
        f"after warm-up (from {start.at:.0f} s): RSS {start.rss_mb:.1f} MB -> max "
        f"{start.rss_mb * (1 + report.rss_growth):.1f} MB ({report.rss_growth:+.1%}; target "
        f"<= +5%), fds {report.growth('fds'):+d}, Redis keys {report.growth('redis_keys'):+d} "
        f"(without a TTL {report.growth('persistent_keys'):+d})"
    )
    print(f"keys churned: {report.churned}")
    families = report.key_families.most_common(8)
    print("Redis keys at the end: " + ", ".join(f"{name} {n}" for name, n in families))
    persistent = report.persistent_families.most_common()
    print("of which without a TTL: " + ", ".join(f"{name} {n}" for name, n in persistent))
    print("outcomes: " + ", ".join(f"{k}: {n}" for k, n in sorted(report.outcomes.items())))
    print(
        "unexpected: "
        + (", ".join(f"{k}: {n}" for k, n in sorted(report.failures.items())) or "none")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds")
    parser.add_argument("--load", type=float, default=0.7, help="share of the measured max")
    parser.add_argument("--warmup", type=float, help="seconds (default: 20%%, at least 10)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--churn-interval", type=float, default=1.0, help="seconds")
    args = parser.parse_args()
    report = run_soak(args.duration, args.load, args.warmup, args.samples, args.churn_interval)
    print_report(report)


if __name__ == "__main__":
    main()
