"""Instructions per request through the gateway, counted by callgrind: a measure of the
hot path's cost that a busy machine does not blur (seconds and req/s do).

    python bench/instructions.py [--requests 300] [--baseline PATH]

The gateway app runs in one process under `valgrind --tool=callgrind`, driven through its
ASGI interface one request at a time against bench/upstream.py (outside valgrind); the
count for N requests minus the count for none (start-up, imports) is divided by N. Rows:
chat non-stream and a 32-chunk stream, with the memory store (lean) and with Redis
admission, ledger and every feature on; `--baseline` adds the same rows for an earlier
checkout (`PYTHONPATH` points there), so two versions compare in one run. The heap is
settled after start-up as `gateway serve` does it (`settle_the_heap`, where a checkout has
it), so the collector's cost is counted as a server pays it.

`--steady` counts only the N requests: callgrind instruments nothing until the app has
started and served a warm-up, and the event loop's clock moves 1 ms a request, so the
work loop timers do (the ledger's flush, the admin keys' poll, set to 5 s here, the lease
and stats loops) is the same however slowly valgrind runs; and only the event loop's
thread is counted (the access-log writer thread wakes every 50 ms of wall time; its
writing of the lines is left out with it, their formatting is the loop's and counted).
On a busy machine the default mode's two whole runs differ by more than a change is
worth (start-up alone varies by millions of instructions, and timers fire by wall time).

Kinds: `non-stream`; `stream`, 32 chunks the upstream writes at once (the relay sees them
in one or a few reads); `stream-paced`, the 32 chunks `--interval-ms` apart, so each is
its own upstream read and client write, as a model generating tokens sends them. The
paced row's (count - non-stream's) / 33 is the relay's cost per upstream read ("per
chunk": 32 content reads and the tail's one).

`--served` runs `gateway serve` itself under callgrind (uvicorn, its HTTP parser and
writes, the client socket: everything a relayed chunk costs the server), driven over
HTTP by a client outside valgrind, one request at a time; the count for none is a server
left idle as long as the loaded run took, so its timers are subtracted too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import BENCH_KEY, REPO, Service, free_port, start_redis, upstream

DRIVER = r"""
import asyncio, json, sys
from gateway.api.app import create_app
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import load_settings

config, count, stream, key = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 40}
            for i in range(9)] + [{"role": "user", "content": "say something"}]
body = json.dumps({"model": "instant", "messages": messages, "stream": stream,
                   "max_tokens": 64}).encode()
headers = [(b"authorization", b"Bearer " + key.encode()),
           (b"content-type", b"application/json"),
           (b"content-length", str(len(body)).encode())]

async def one(app):
    sent = []
    done = asyncio.Event()
    delivered = False
    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}
    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": headers, "query_string": b"", "scheme": "http",
             "server": ("127.0.0.1", 8080), "client": ("127.0.0.1", 5000)}
    await app(scope, receive, send)
    assert sent[0]["status"] == 200, sent

async def main():
    runtime = GatewayRuntime(load_settings(config))
    app = create_app(runtime)
    await runtime.start()
    try:  # what a serving process does once started (checkouts that have it)
        from gateway.pipeline.runtime import settle_the_heap
    except ImportError:
        pass
    else:
        settle_the_heap()
    for _ in range(count):
        await one(app)
    await runtime.stop()

asyncio.run(main())
"""


# --steady: the loop's clock is the driver's (1 ms a request); the warm-up is not counted;
# the driver says when it is ready and done, and waits for the parent between
STEADY_WARM_UP = 30


def steady_driver(folder: Path) -> str:
    driver = DRIVER.replace(
        "async def one(app):\n    sent = []",
        "async def one(app):\n    CLOCK[0] += 0.001\n    sent = []",
    ).replace(
        "async def main():\n",
        "CLOCK = [0.0]\n\nasync def main():\n    loop = asyncio.get_running_loop()\n"
        "    CLOCK[0] = loop.time()\n    loop.time = lambda: CLOCK[0]\n",
    )
    counted = (
        f"    for _ in range({STEADY_WARM_UP}):\n        await one(app)\n"
        "    import os, time\n"
        f"    open({str(folder / 'ready')!r}, 'w').close()\n"
        f"    while not os.path.exists({str(folder / 'go')!r}):\n        time.sleep(0.02)\n"
        "    for _ in range(count):\n        await one(app)\n"
        f"    open({str(folder / 'done')!r}, 'w').close()\n"
        "    while True:\n        time.sleep(1)\n"
    )
    steady = driver.replace("    for _ in range(count):\n        await one(app)\n", counted)
    if steady == DRIVER:
        raise RuntimeError("the driver changed: --steady could not patch it")
    return steady


def steady_instructions(
    config: Path, count: int, stream: bool, source: Path | None, folder: Path
) -> int:
    """Instructions of `count` requests after the warm-up (see --steady)."""
    for name in ("ready", "go", "done"):
        (folder / name).unlink(missing_ok=True)
    out = folder / "callgrind.out"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
        f"--callgrind-out-file={out}",
        sys.executable, "-c", steady_driver(folder), str(config), str(count),
        "1" if stream else "0", BENCH_KEY,
    ]  # fmt: skip
    cwd = source if source is not None else Path(__file__).resolve().parents[1]
    with tempfile.TemporaryFile("w+") as stderr:
        driver = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, text=True
        )
        try:
            for name in ("ready", "done"):
                while not (folder / name).exists():
                    if driver.poll() is not None:
                        stderr.seek(0)
                        raise SystemExit(f"driver failed:\n{stderr.read()[-3000:]}")
                    time.sleep(0.2)
                if name == "ready":
                    control = ["callgrind_control", "-i", "on", str(driver.pid)]
                    subprocess.run(control, check=True, capture_output=True)
                    (folder / "go").touch()
            dump = ["callgrind_control", "-d", str(driver.pid)]
            subprocess.run(dump, check=True, capture_output=True)
        finally:
            driver.kill()
            driver.wait()
    # the event loop's thread only: the access-log writer thread wakes every 50 ms of
    # wall time (its writes of the lines are left out with it)
    dumps = sorted(folder.glob("callgrind.out.*"))
    main_thread = [dump for dump in dumps if dump.name.endswith("-01")]
    text = main_thread[-1].read_text() if main_thread else ""
    match = re.search(r"^totals: (\d+)", text, re.MULTILINE)
    for dumped in [out, *dumps]:
        dumped.unlink(missing_ok=True)
    if match is None:
        raise SystemExit("no callgrind dump of the loop's thread after the counted requests")
    return int(match.group(1))


def write_config(
    folder: Path, upstream_port: int, redis_port: int | None, server_port: int | None = None
) -> Path:
    """A config every checkout since round one can load (bench/processes.py's gateway
    config adds models an older baseline would refuse), so two versions compare."""
    key: dict[str, object] = {"id": "bench", "hash": "sha256:" + _sha256(BENCH_KEY)}
    store: dict[str, object] = {"kind": "memory"}
    if redis_port is not None:
        store = {
            "kind": "redis",
            "redis_url": f"redis://127.0.0.1:{redis_port}/0",
            "cluster": False,
        }
        key["limits"] = {
            "requests_per_minute": 100_000_000,
            "tokens_per_minute": 1_000_000_000_000,
            "max_concurrent": 100_000,
        }
        key["budgets"] = [{"usd": 1_000_000_000, "period": "month"}]
    server: dict[str, object] = {"log_format": "json"}
    if server_port is not None:
        server.update(host="127.0.0.1", port=server_port)
    config = {
        "server": server,
        "store": store,
        "providers": {
            "instant": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{upstream_port}/v1",
                "retry": {"max_attempts": 1},
            }
        },
        "policies": ["policy.yaml"],
    }
    policy = {
        "models": {
            "instant": {
                "deployments": [{"provider": "instant", "upstream_model": "bench-model"}],
                "prices": {"input": 0.28, "output": 0.42},
            }
        },
        "tenants": {"bench": {"keys": [key]}},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    return folder / "config.yaml"


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def instructions(config: Path, count: int, stream: bool, source: Path | None) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-c", DRIVER, str(config), str(count), "1" if stream else "0", BENCH_KEY,
    ]  # fmt: skip
    # `python -c` puts the working directory first on sys.path: run from the source
    cwd = source if source is not None else Path(__file__).resolve().parents[1]
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"driver failed:\n{done.stderr[-3000:]}")
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise SystemExit(f"no callgrind total in:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def request_bytes(stream: bool) -> bytes:
    """The driver's request, over HTTP."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 40} for i in range(9)
    ] + [{"role": "user", "content": "say something"}]
    body = json.dumps(
        {"model": "instant", "messages": messages, "stream": stream, "max_tokens": 64}
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"authorization: Bearer {BENCH_KEY}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _answer(sock: socket.socket) -> None:
    """Read one whole answer (Content-Length or chunked) off a keep-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, data = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"the gateway answered {head[:200]!r}")
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        while len(data) < length:
            data += _recv(sock)
        return
    while not data.endswith(b"0\r\n\r\n"):
        data += _recv(sock)


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(1 << 16)
    if not data:
        raise SystemExit("the gateway closed the connection")
    return data


def served_instructions(
    config: Path, count: int, stream: bool, source: Path | None, port: int, idle: float
) -> tuple[int, float]:
    """`gateway serve` under callgrind: its count after `count` requests over one
    keep-alive connection (or, with none, after `idle` seconds), and how long they took."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config),
    ]  # fmt: skip
    env = {"PYTHONHASHSEED": "0"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    server = Service("gateway-callgrind", command, f"http://127.0.0.1:{port}/healthz", env,
                     source or REPO)  # fmt: skip
    server.start(timeout=900)
    took = 0.0
    try:
        if count:
            request = request_bytes(stream)
            with socket.create_connection(("127.0.0.1", port)) as sock:
                started = time.monotonic()
                for _ in range(count):
                    sock.sendall(request)
                    _answer(sock)
                took = time.monotonic() - started
        else:
            time.sleep(idle)
    finally:
        assert server.process is not None
        server.process.terminate()
        server.process.wait(timeout=600)
    log = server.log.read_text(errors="replace")
    match = re.search(r"Collected : (\d+)", log)
    if match is None:
        raise SystemExit(f"no callgrind total in:\n{log[-2000:]}")
    return int(match.group(1)), took


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--baseline", type=Path, help="an earlier checkout to compare against")
    parser.add_argument("--targets", default="gateway-lean,gateway", help="rows to count")
    parser.add_argument(
        "--kinds",
        default="non-stream,stream",
        help="rows to count (non-stream,stream,stream-paced)",
    )
    parser.add_argument(
        "--interval-ms", type=float, default=20.0, help="stream-paced: the gap between chunks"
    )
    parser.add_argument(
        "--served", action="store_true", help="count `gateway serve` over HTTP, not the app"
    )
    parser.add_argument(
        "--steady",
        action="store_true",
        help="count only the requests, after a warm-up, on a clock of 1 ms a request",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    sources: dict[str, Path | None] = {"": None}
    if args.baseline is not None:
        sources["@baseline"] = args.baseline
    for source in sources.values():
        # a checkout's first import compiles its modules: not a cost of any request
        package = (source or REPO) / "gateway"
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    port = free_port()
    paced_port = free_port()
    services = [
        upstream(port, None, "--chunks", "32").start(),
        upstream(paced_port, None, "--chunks", "32", "--chunk-interval-ms", str(args.interval_ms))
        .start(),
    ]  # fmt: skip
    redis_port = free_port()
    services.append(start_redis(redis_port, None))
    server_port = free_port() if args.served else None
    folder = Path(tempfile.mkdtemp(prefix="gw-instructions-"))
    configs: dict[tuple[str, bool], Path] = {}
    for target, store_port in (("gateway-lean", None), ("gateway", redis_port)):
        for paced in (False, True):
            where = folder / f"{target}{'-paced' if paced else ''}"
            where.mkdir()
            upstream_port = paced_port if paced else port
            configs[target, paced] = write_config(where, upstream_port, store_port, server_port)
    if args.steady:
        # the admin keys' poll (every 100 ms by default) is wall-clock work, not a request's
        for paced in (False, True):
            config = yaml.safe_load(configs["gateway", paced].read_text())
            config["store"]["runtime_keys_poll_ms"] = 5000
            configs["gateway", paced].write_text(yaml.safe_dump(config))
    rows = []
    try:
        for label, source in sources.items():
            for target in ("gateway-lean", "gateway"):
                if target not in args.targets.split(","):
                    continue
                for kind in ("non-stream", "stream", "stream-paced"):
                    if kind not in args.kinds.split(","):
                        continue
                    stream, paced = kind != "non-stream", kind == "stream-paced"
                    config = configs[target, paced]
                    if server_port is not None:
                        total, took = served_instructions(
                            config, args.requests, stream, source, server_port, 0.0
                        )
                        base, _ = served_instructions(config, 0, stream, source, server_port, took)
                        per_request = (total - base) / args.requests
                    elif args.steady:
                        counted = steady_instructions(
                            config, args.requests, stream, source, config.parent
                        )
                        per_request = counted / args.requests
                    else:
                        base = instructions(config, 0, stream, source)
                        total = instructions(config, args.requests, stream, source)
                        per_request = (total - base) / args.requests
                    name = {"stream": "32-chunk stream", "stream-paced": "32 paced chunks"}.get(
                        kind, kind
                    )
                    rows.append((name, target + label, per_request))
                    print(f"{name:18} {target + label:24} {per_request:>12,.0f}", flush=True)
    finally:
        for service in reversed(services):
            service.stop()
    print()
    print(f"{'scenario':18} {'target':24} {'instructions/request':>22}")
    for kind, target, per_request in sorted(rows):
        print(f"{kind:18} {target:24} {per_request:>22,.0f}")
    per_read = _per_read(rows)
    for target, value in per_read.items():
        print(f"per paced chunk (paced - non-stream) / 33, {target}: {value:,.0f}")
    print(
        json.dumps(
            {
                "requests": args.requests,
                "steady": args.steady,
                "served": args.served,
                "per_chunk": per_read,
            }
        )
    )


def _per_read(rows: list[tuple[str, str, float]]) -> dict[str, float]:
    """Each target's relay cost per upstream read: the paced stream's 33 reads (32 chunks
    and the tail) over what a non-stream request costs."""
    counts = {(kind, target): value for kind, target, value in rows}
    return {
        target: (value - counts[("non-stream", target)]) / 33
        for (kind, target), value in counts.items()
        if kind == "32 paced chunks" and ("non-stream", target) in counts
    }


if __name__ == "__main__":
    main()
