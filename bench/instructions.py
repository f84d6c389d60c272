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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import BENCH_KEY, free_port, start_redis, upstream

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


def write_config(folder: Path, upstream_port: int, redis_port: int | None) -> Path:
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
    config = {
        "server": {"log_format": "json"},
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--baseline", type=Path, help="an earlier checkout to compare against")
    parser.add_argument("--targets", default="gateway-lean,gateway", help="rows to count")
    parser.add_argument("--kinds", default="non-stream,stream", help="rows to count")
    parser.add_argument(
        "--steady",
        action="store_true",
        help="count only the requests, after a warm-up, on a clock of 1 ms a request",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    port = free_port()
    services = [upstream(port, None, "--chunks", "32").start()]
    redis_port = free_port()
    services.append(start_redis(redis_port, None))
    folder = Path(tempfile.mkdtemp(prefix="gw-instructions-"))
    lean = folder / "lean"
    full = folder / "full"
    lean.mkdir()
    full.mkdir()
    configs = {
        "gateway-lean": write_config(lean, port, None),
        "gateway": write_config(full, port, redis_port),
    }
    if args.steady:
        # the admin keys' poll (every 100 ms by default) is wall-clock work, not a request's
        config = yaml.safe_load(configs["gateway"].read_text())
        config["store"]["runtime_keys_poll_ms"] = 5000
        configs["gateway"].write_text(yaml.safe_dump(config))
    sources: dict[str, Path | None] = {"": None}
    if args.baseline is not None:
        sources["@baseline"] = args.baseline
    rows = []
    try:
        for label, source in sources.items():
            for target, config in configs.items():
                if target not in args.targets.split(","):
                    continue
                for stream in (False, True):
                    if ("stream" if stream else "non-stream") not in args.kinds.split(","):
                        continue
                    if args.steady:
                        counted = steady_instructions(
                            config, args.requests, stream, source, config.parent
                        )
                        per_request = counted / args.requests
                    else:
                        base = instructions(config, 0, stream, source)
                        total = instructions(config, args.requests, stream, source)
                        per_request = (total - base) / args.requests
                    kind = "32-chunk stream" if stream else "non-stream"
                    rows.append((kind, target + label, per_request))
                    print(f"{kind:18} {target + label:24} {per_request:>12,.0f}", flush=True)
    finally:
        for service in reversed(services):
            service.stop()
    print()
    print(f"{'scenario':18} {'target':24} {'instructions/request':>22}")
    for kind, target, per_request in sorted(rows):
        print(f"{kind:18} {target:24} {per_request:>22,.0f}")
    print(json.dumps({"requests": args.requests, "steady": args.steady}))


if __name__ == "__main__":
    main()
