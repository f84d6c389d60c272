"""Thousands of paced streams at once: does any stall, and what does the proxy add between
chunks?

    .venv/bin/python bench/streams.py [--streams 1000] [--chunks 100] [--interval-ms 20]
        [--workers 1] [--targets direct,nginx,gateway[,gateway-lean]] [--gateway-python PATH]

The upstream (bench/upstream.py) paces every stream's chunks `--interval-ms` apart, as a
model generating tokens does. All the streams are opened at once (in a ramp of
`--ramp-seconds`) and held open until their last chunk; each chunk's arrival is noted
at the client, and the gaps between a stream's chunks are its inter-chunk times. The
direct run (straight at the upstream) is the baseline: the proxy's added inter-chunk
p99 is its p99 gap minus the direct run's. `open p99` takes only the gaps that ended
while every stream was open (after the last one's headers came, before the first one
finished): the streams held open, apart from the opening of the others; it needs streams
that outlast the ramp and the proxy's opening of them (`--chunks 300`), else it is nan.
A stream stalls when it fails, does not finish or waits more than `--stall-ms` for a
chunk.

The gateway runs with every production feature on (Redis admission, the Redis ledger,
metrics, access logs; bench/processes.py; `gateway-lean`, as in bench/overhead.py, is
the gateway on its in-memory store instead), pinned to core 0 with one worker, or
unpinned with `--workers 2`; the upstream, Redis and this client share core 1 (with two
workers, every process shares both cores). Memory per open stream is the gateway's
RSS with every stream open, minus its RSS before, over the streams; CPU per chunk is its
CPU over the run over the chunks it relayed.

The soft open-files limit of this process (and so of the processes it starts) is
raised to the hard limit: each stream holds two sockets in the gateway.

`--rig c` (the default where a C compiler is installed) runs the upstream and the client
as bench/stream_rig.c, compiled here: the same stream, request and measures, but the
Python pair spent its core before the proxies spent theirs (at 1,000 streams the direct
run waited 1.4 s for first chunks and saw 54 ms gaps in streams paced at 20), so it
measured itself. `--rig python` keeps bench/upstream.py and this file's asyncio client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import (
    BENCH_KEY,
    Service,
    cpu_seconds,
    describe_interpreter,
    free_port,
    gateway,
    memory_bytes,
    nginx,
    pinned,
    start_redis,
    upstream,
)

PROXY_CORE, LOAD_CORE = 0, 1


def raise_open_files() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass
class StreamsResult:
    streams: int
    finished: int = 0
    failed: int = 0
    stalled: int = 0
    chunks: int = 0
    gaps: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    # when each gap ended, in seconds from the start
    gap_ends: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    first_chunk: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    worst_gap: float = 0.0
    elapsed: float = 0.0
    all_open_at: float = 0.0  # seconds from the start when the last stream got its headers
    first_done_at: float | None = None  # and when the first one finished
    open_now: int = 0  # streams connected and not yet finished
    # the C rig's client reports percentiles, not every gap: (gap p50, p99, p99.9,
    # first chunk p50, p99, p99 of the gaps once every stream was open) in seconds
    quantiles: tuple[float, float, float, float, float, float] | None = None

    def gap(self, q: float) -> float:
        if self.quantiles is not None:
            return {50.0: self.quantiles[0], 99.0: self.quantiles[1], 99.9: self.quantiles[2]}[q]
        return percentile(self.gaps, q)

    def open_gap_p99(self) -> float:
        """The gap p99 while every stream was open: the gaps that ended after the last
        stream got its headers and before the first one finished (the streams held open,
        apart from the opening and closing of others; nan when the first finished before
        the last opened)."""
        if self.quantiles is not None:
            return self.quantiles[5] if self.quantiles[5] >= 0 else float("nan")
        done = self.first_done_at if self.first_done_at is not None else float("inf")
        held = array(
            "d",
            (
                g
                for g, end in zip(self.gaps, self.gap_ends, strict=True)
                if self.all_open_at <= end <= done
            ),
        )
        return percentile(held, 99)

    def first(self, q: float) -> float:
        if self.quantiles is not None:
            return {50.0: self.quantiles[3], 99.0: self.quantiles[4]}[q]
        return percentile(self.first_chunk, q)


def percentile(values: array, q: float) -> float:  # type: ignore[type-arg]
    if not values:
        return float("nan")
    data = sorted(values)
    return float(data[min(len(data) - 1, max(0, round(q / 100 * (len(data) - 1))))])


class StreamClient(asyncio.Protocol):
    """One streamed request; notes when each read brought SSE events."""

    def __init__(self, request: bytes, result: StreamsResult, stall: float, started: float):
        self.request = request
        self.result = result
        self.stall = stall
        self.started = started
        self.sent_at = 0.0
        self.last: float | None = None
        self.head = b""
        self.headed = False
        self.tail = b""
        self.done = asyncio.get_running_loop().create_future()
        self.events = 0
        self.max_gap = 0.0
        self.ok = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.result.open_now += 1
        self.sent_at = time.perf_counter()
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.headed:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if self.head[9:12] != b"200":
                self._finish(False)
                return
            self.headed = True
            self.result.all_open_at = max(self.result.all_open_at, now - self.started)
            data = self.head[end + 4 :]
        events = data.count(b"data: ")
        if events:
            if self.last is None:
                self.result.first_chunk.append(now - self.sent_at)
            else:
                gap = now - self.last
                self.result.gaps.append(gap)
                self.result.gap_ends.append(now - self.started)
                self.max_gap = max(self.max_gap, gap)
            self.last = now
            self.events += events
        self.tail = (self.tail + data)[-64:]
        if b"data: [DONE]" in self.tail and self.tail.endswith(b"0\r\n\r\n"):
            self._finish(True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(False)

    def _finish(self, ok: bool) -> None:
        if not self.done.done():
            if self.result.first_done_at is None:
                self.result.first_done_at = time.perf_counter() - self.started
            self.result.open_now -= 1
            self.ok = ok
            self.done.set_result(None)


async def run_streams(
    port: int, body: bytes, result: StreamsResult, ramp: float, stall: float, auth: bool
) -> StreamsResult:
    """`result.streams` streams at once; `result` fills as they run (`open_now`)."""
    streams = result.streams
    headers = f"Authorization: Bearer {BENCH_KEY}\r\n" if auth else ""
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    clients: list[StreamClient] = []

    async def one(delay: float) -> None:
        await asyncio.sleep(delay)
        client = StreamClient(request, result, stall, started)
        clients.append(client)
        try:
            transport, _ = await loop.create_connection(lambda: client, "127.0.0.1", port)
        except OSError:
            result.open_now += 1  # (never connected: _finish takes it off again)
            client._finish(False)
            return
        await client.done
        transport.close()

    await asyncio.gather(*(one(ramp * i / streams) for i in range(streams)))
    result.elapsed = time.perf_counter() - started
    for client in clients:
        result.chunks += client.events
        if client.ok:
            result.finished += 1
        else:
            result.failed += 1
        if not client.ok or client.max_gap > stall:
            result.stalled += 1
        result.worst_gap = max(result.worst_gap, client.max_gap)
    return result


def stream_body() -> bytes:
    return json.dumps(
        {
            "model": "instant",
            "messages": [{"role": "user", "content": "Tell me a long story, slowly."}],
            "max_tokens": 256,
            "stream": True,
        }
    ).encode()


@dataclass
class Row:
    target: str
    result: StreamsResult
    cpu_us_per_chunk: float | None = None
    rss_idle_mb: float | None = None
    rss_open_mb: float | None = None
    open_at_sample: int = 0  # streams open when rss_open_mb was read
    rss_peak_mb: float | None = None
    notes: list[str] = field(default_factory=list)


def build_rig() -> Path:
    """bench/stream_rig.c, compiled into a temporary folder."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("--rig c needs a C compiler (cc or gcc); or use --rig python")
    binary = Path(tempfile.mkdtemp(prefix="stream-rig-")) / "stream_rig"
    source = Path(__file__).with_name("stream_rig.c")
    subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def measure_c(
    rig: Path, row: Row, port: int, proxy: Service | None, args: argparse.Namespace, auth: bool
) -> None:
    """The C client's run: its "open N" lines while it runs (the proxy's RSS is read when
    more streams are open than ever before), then its results as one line of JSON."""
    headers = f"Authorization: Bearer {BENCH_KEY}\r\n" if auth else ""
    body = stream_body()
    request_file = Path(tempfile.mkdtemp(prefix="stream-rig-")) / "request.http"
    request_file.write_bytes(
        (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
        ).encode()
        + body
    )
    command = [
        str(rig), "client", str(port), str(args.streams), str(args.ramp_seconds),
        str(args.stall_ms), str(request_file),
    ]  # fmt: skip
    client = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    summary: dict[str, float] | None = None
    for line in client.stdout:
        if line.startswith("open "):
            open_now = int(line.split()[1])
            if proxy is not None and open_now > row.open_at_sample:
                row.rss_open_mb = memory_bytes(proxy.pid) / 1e6
                row.open_at_sample = open_now
        elif line.startswith("{"):
            summary = json.loads(line)
    if client.wait() != 0 or summary is None:
        raise SystemExit(f"the stream rig's client failed (exit {client.returncode})")
    result = row.result
    result.finished, result.failed = int(summary["finished"]), int(summary["failed"])
    result.stalled, result.chunks = int(summary["stalled"]), int(summary["chunks"])
    result.worst_gap, result.elapsed = summary["worst_gap"], summary["elapsed"]
    result.all_open_at = summary["all_open_at"]
    result.quantiles = (
        summary["gap_p50"], summary["gap_p99"], summary["gap_p999"],
        summary["first_p50"], summary["first_p99"], summary["open_gap_p99"],
    )  # fmt: skip


def measure(
    target: str,
    port: int,
    proxy: Service | None,
    args: argparse.Namespace,
    auth: bool,
    rig: Path | None = None,
) -> Row:
    row = Row(target, StreamsResult(args.streams))
    if proxy is not None:
        row.rss_idle_mb = memory_bytes(proxy.pid) / 1e6
        cpu_before = cpu_seconds(proxy.pid)

    async def run() -> StreamsResult:
        stall = args.stall_ms / 1000
        streams = run_streams(port, stream_body(), row.result, args.ramp_seconds, stall, auth)
        task = asyncio.ensure_future(streams)
        while proxy is not None and not task.done():
            # the proxy's memory when the most streams were open at once
            await asyncio.sleep(0.2)
            open_now = row.result.open_now
            if open_now > row.open_at_sample:
                row.rss_open_mb = memory_bytes(proxy.pid) / 1e6
                row.open_at_sample = open_now
        return await task

    if rig is not None:
        measure_c(rig, row, port, proxy, args, auth)
    else:
        # uvloop: the client reads as many chunks as the proxy relays, on a shared core
        row.result = uvloop.run(run()) if uvloop is not None else asyncio.run(run())
    if proxy is not None:
        row.rss_peak_mb = memory_bytes(proxy.pid, "VmHWM") / 1e6
        cpu = cpu_seconds(proxy.pid) - cpu_before
        row.cpu_us_per_chunk = cpu / max(1, row.result.chunks) * 1e6
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--ramp-seconds", type=float, default=1.0)
    parser.add_argument("--stall-ms", type=float, default=250.0, help="a longer gap is a stall")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--targets", default="direct,nginx,gateway")
    parser.add_argument(
        "--rig",
        choices=("c", "python"),
        default="c" if shutil.which("cc") or shutil.which("gcc") else "python",
        help="the upstream and client: bench/stream_rig.c, or bench/upstream.py and asyncio",
    )
    parser.add_argument(
        "--gateway-python",
        type=Path,
        help="the interpreter the gateway runs on (default: this one), a venv's python with\n"
        "the gateway installed; named under the table",
    )
    args = parser.parse_args()
    limit = raise_open_files()
    if limit < 2 * args.streams + 200:
        raise SystemExit(f"open-files limit {limit} is too low for {args.streams} streams")
    proxy_core = PROXY_CORE if args.workers == 1 else None
    load_core = LOAD_CORE if args.workers == 1 else None
    if load_core is not None:
        import os

        os.sched_setaffinity(0, {load_core})
    flags = ["--chunks", str(args.chunks), "--chunk-interval-ms", str(args.interval_ms)]
    upstream_port = free_port()
    rig = build_rig() if args.rig == "c" else None
    if rig is not None:
        command = [str(rig), "upstream", str(upstream_port), str(args.chunks),
                   str(args.interval_ms)]  # fmt: skip
        paced = Service(
            "stream-rig-upstream",
            pinned(command, load_core),
            f"http://127.0.0.1:{upstream_port}/",
        )
    else:
        paced = upstream(upstream_port, load_core, *flags)
    services: list[Service] = [paced.start()]
    rows: list[Row] = []
    try:
        for target in args.targets.split(","):
            if target == "direct":
                rows.append(measure(target, upstream_port, None, args, auth=False, rig=rig))
            elif target == "nginx":
                listen = free_port()
                proxy = nginx({listen: upstream_port}, proxy_core)
                if proxy is None:
                    print("nginx: not installed; skipped", file=sys.stderr)
                    continue
                services.append(proxy.start())
                rows.append(measure(target, listen, proxy, args, auth=False, rig=rig))
                proxy.stop()
            elif target in ("gateway", "gateway-lean"):
                # gateway-lean: the in-memory store, no Redis admission or ledger
                redis_port, port = free_port(), free_port()
                if target == "gateway":
                    services.append(start_redis(redis_port, load_core))
                proxy = gateway(
                    port,
                    {"instant": upstream_port},
                    proxy_core,
                    redis_port=redis_port if target == "gateway" else None,
                    workers=args.workers,
                    python=args.gateway_python,
                )
                services.append(proxy.start(timeout=120))
                name = f"{target}-{args.workers}w"
                rows.append(measure(name, port, proxy, args, auth=True, rig=rig))
                proxy.stop()
            else:
                raise SystemExit(f"unknown target {target}")
    finally:
        for service in reversed(services):
            service.stop()
    print_table(rows, args)
    if {"gateway", "gateway-lean"} & set(args.targets.split(",")):
        print(f"gateway interpreter: {describe_interpreter(args.gateway_python)}")


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    print(
        f"{args.streams} streams at once, {args.chunks} chunks {args.interval_ms:g} ms apart, "
        f"ramp {args.ramp_seconds:g} s, stall = a gap over {args.stall_ms:g} ms or unfinished, "
        f"rig: {args.rig}"
    )
    header = (
        f"{'target':12} {'finished':>9} {'stalled':>8} {'gap p50':>8} {'gap p99':>8} "
        f"{'p99.9':>8} {'worst':>8} {'added p99':>10} {'open p99':>9} {'added':>7} "
        f"{'1st p50':>8} {'1st p99':>8} "
        f"{'CPU us/chunk':>12} {'RSS idle':>9} {'RSS open':>9} {'(open)':>7} {'KB/stream':>10} "
        f"{'peak RSS':>9}"
    )
    print(header)
    print("-" * len(header))
    direct = next((r for r in rows if r.target == "direct"), None)
    for row in rows:
        result = row.result
        p99 = result.gap(99) * 1000
        added = added_open = ""
        open_p99 = result.open_gap_p99() * 1000
        if direct is not None and row is not direct:
            added = f"{p99 - direct.result.gap(99) * 1000:+.2f}"
            added_open = f"{open_p99 - direct.result.open_gap_p99() * 1000:+.2f}"
        per_stream = ""
        if row.rss_open_mb is not None and row.rss_idle_mb is not None:
            grown = row.rss_open_mb - row.rss_idle_mb
            per_stream = f"{grown * 1000 / max(1, row.open_at_sample):.1f}"
        print(
            f"{row.target:12} {result.finished:9} {result.stalled:8} "
            f"{result.gap(50) * 1000:8.2f} {p99:8.2f} "
            f"{result.gap(99.9) * 1000:8.2f} {result.worst_gap * 1000:8.1f} "
            f"{added:>10} {open_p99:9.2f} {added_open:>7} {result.first(50) * 1000:8.2f} "
            f"{result.first(99) * 1000:8.2f} "
            f"{'' if row.cpu_us_per_chunk is None else f'{row.cpu_us_per_chunk:.1f}':>12} "
            f"{'' if row.rss_idle_mb is None else f'{row.rss_idle_mb:.0f} MB':>9} "
            f"{'' if row.rss_open_mb is None else f'{row.rss_open_mb:.0f} MB':>9} "
            f"{row.open_at_sample or '':>7} {per_stream:>10} "
            f"{'' if row.rss_peak_mb is None else f'{row.rss_peak_mb:.0f} MB':>9}"
        )


if __name__ == "__main__":
    main()
