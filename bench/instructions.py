"""Instructions per request through the gateway, counted by callgrind: a measure of the
hot path's cost that a busy machine does not blur (seconds and req/s do).

    python bench/instructions.py [--requests 300] [--baseline PATH] [--endpoints all]

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

`--endpoints` (default: chat) adds rows for the other client APIs, of each of `--kinds`
(embeddings: non-stream only): /v1/responses, /v1/messages passed through to an
Anthropic-kind provider and translated to the OpenAI-kind one (bench/upstream.py answers
both shapes), /v1/completions and /v1/embeddings. With any of them, every row (chat's
too) sends bench/overhead.py's bodies, the same prompt in each API's shape, the config
adds overhead's Anthropic provider and embedding model, and each row prints its ratio to
chat's row of its kind and target (the issue's "every endpoint within 10% of chat's").
Every run then first sends each endpoint's request twice, the count-0 run too, so
first-request costs (lazy imports, caches) are in no row's count, and the event loop's
clock moves 1 ms a request, as with `--steady`, so timers fire by requests served, not
by how slowly callgrind ran them (the same code's chat row read 779,567 and 944,384
instructions in two runs minutes apart without it). With `--steady` the endpoint rows
are counted as its rows are (after the warm-ups, the loop's thread only). `--endpoints`
and `--steady` are not for `--served`: the served process's loop keeps the wall's
clock, so its rows and their ratios would move with how slowly valgrind ran.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import (
    ANTHROPIC_UPSTREAM,
    BENCH_KEY,
    EMBEDDING_MODEL,
    REPO,
    Service,
    bench_key_and_store,
    describe_interpreter,
    free_port,
    start_redis,
    upstream,
)

DRIVER = r"""
import asyncio, json, sys
from gateway.api.app import create_app
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import load_settings

config, count, key, path, body = sys.argv[1:6]
count, body = int(count), body.encode()
clock, warm = sys.argv[6] == "1", json.loads(sys.argv[7])

def headers_for(path, body):
    headers = [(b"authorization", b"Bearer " + key.encode()),
               (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if path == "/v1/messages":
        headers.append((b"anthropic-version", b"2023-06-01"))
    return headers
headers = headers_for(path, body)

# with `clock`, the loop's clock moves 1 ms a request instead of with the wall (under
# callgrind a request takes ~50x as long): the per-second timers of the store, the
# ledger and the admin poll then fire as often in every run, not by how slowly it ran
CLOCK = [0.0]

async def one(app, path=path, body=body, headers=headers):
    CLOCK[0] += 0.001
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
    scope = {"type": "http", "method": "POST", "path": path,
             "headers": headers, "query_string": b"", "scheme": "http",
             "server": ("127.0.0.1", 8080), "client": ("127.0.0.1", 5000)}
    await app(scope, receive, send)
    assert sent[0]["status"] == 200, sent

async def main():
    if clock:
        loop = asyncio.get_running_loop()
        CLOCK[0] = loop.time()
        loop.time = lambda: CLOCK[0]
    runtime = GatewayRuntime(load_settings(config))
    app = create_app(runtime)
    await runtime.start()
    try:  # what a serving process does once started (checkouts that have it)
        from gateway.pipeline.runtime import settle_the_heap
    except ImportError:
        pass
    else:
        settle_the_heap()
    # each endpoint's request twice, in every run (the count-0 run too): its first-request
    # costs (lazy imports, caches) fall out of the difference
    for warm_path, warm_body in warm:
        warm_body = warm_body.encode()
        for _ in range(2):
            await one(app, warm_path, warm_body, headers_for(warm_path, warm_body))
    for _ in range(count):
        await one(app)
    await runtime.stop()

asyncio.run(main())
"""


@dataclass(frozen=True)
class Driven:
    """What one row's driver runs: the config, the request it counts (path and body),
    whether the loop's clock moves 1 ms a request, and the requests it sends twice each
    before counting (the --endpoints warm-up)."""

    config: Path
    path: str
    body: bytes
    clock: bool = False
    warm: tuple[tuple[str, bytes], ...] = ()

    def command(self, program: str, count: int, *valgrind: str) -> list[str]:
        warm = json.dumps([[path, body.decode()] for path, body in self.warm])
        return [
            "valgrind", "--tool=callgrind", *valgrind, str(GATEWAY_PYTHON[0]), "-c", program,
            str(self.config), str(count), BENCH_KEY, self.path, self.body.decode(),
            "1" if self.clock else "0", warm,
        ]  # fmt: skip


def _environment(source: Path | None, tmp: str) -> tuple[dict[str, str], Path]:
    """The driver's environment and working directory: `python -c` puts the working
    directory first on sys.path, so a baseline runs from its own checkout. `tmp`, a
    directory of the run's own, is its TMPDIR: the ledger keeps its journal there (the
    default `store.spill_dir`), and a driver killed at the end (--steady) leaves its
    records in it, which the next run on the same Redis would claim and replay while
    counted (~+55k instructions a request on the gateway row of whichever ran second)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "TMPDIR": tmp}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    return env, source if source is not None else REPO


# the interpreter the counted gateway runs on (--python; this one by default)
GATEWAY_PYTHON = [Path(sys.executable)]

# --steady: the warm-up is not counted; the driver says when it is ready and done, and
# waits for the parent between (its loop's clock is the driver's, 1 ms a request)
STEADY_WARM_UP = 30


def steady_driver(folder: Path) -> str:
    counted = (
        f"    for _ in range({STEADY_WARM_UP}):\n        await one(app)\n"
        "    import os, time\n"
        f"    open({str(folder / 'ready')!r}, 'w').close()\n"
        f"    while not os.path.exists({str(folder / 'go')!r}):\n        time.sleep(0.02)\n"
        "    for _ in range(count):\n        await one(app)\n"
        f"    open({str(folder / 'done')!r}, 'w').close()\n"
        "    while True:\n        time.sleep(1)\n"
    )
    steady = DRIVER.replace("    for _ in range(count):\n        await one(app)\n", counted)
    if steady == DRIVER:
        raise RuntimeError("the driver changed: --steady could not patch it")
    return steady


def steady_instructions(driven: Driven, count: int, source: Path | None) -> int:
    """Instructions of `count` requests after the warm-up (see --steady)."""
    folder = driven.config.parent
    for name in ("ready", "go", "done"):
        (folder / name).unlink(missing_ok=True)
    out = folder / "callgrind.out"
    command = driven.command(
        steady_driver(folder),
        count,
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
    )
    with (
        tempfile.TemporaryFile("w+") as stderr,
        tempfile.TemporaryDirectory(prefix="tmp-", dir=folder) as tmp,
    ):
        env, cwd = _environment(source, tmp)
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
                    # (its TMPDIR: where valgrind's vgdb finds the driver)
                    subprocess.run(control, env=env, check=True, capture_output=True)
                    (folder / "go").touch()
            dump = ["callgrind_control", "-d", str(driver.pid)]
            subprocess.run(dump, env=env, check=True, capture_output=True)
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
    folder: Path,
    upstream_port: int,
    redis_port: int | None,
    server_port: int | None = None,
    endpoints: bool = False,
) -> Path:
    """A config every checkout since round one can load (bench/processes.py's gateway
    config adds models an older baseline would refuse), so two versions compare. With
    `endpoints`, the endpoint rows' models as bench/processes.py configures them: "claude"
    on an Anthropic-kind provider (the same upstream, which answers /v1/messages itself)
    and "instant-embed", an embedding model on the instant provider."""
    key, store = bench_key_and_store(redis_port)
    server: dict[str, object] = {"log_format": "json"}
    if server_port is not None:
        server.update(host="127.0.0.1", port=server_port)
    config: dict[str, Any] = {
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
    policy: dict[str, Any] = {
        "models": {
            "instant": {
                "deployments": [{"provider": "instant", "upstream_model": "bench-model"}],
                "prices": {"input": 0.28, "output": 0.42},
            }
        },
        "tenants": {"bench": {"keys": [key]}},
    }
    if endpoints:
        config["providers"][ANTHROPIC_UPSTREAM] = {
            "kind": "anthropic",
            "base_url": f"http://127.0.0.1:{upstream_port}",
            "retry": {"max_attempts": 1},
        }
        models = policy["models"]
        models[ANTHROPIC_UPSTREAM] = {
            "deployments": [{"provider": ANTHROPIC_UPSTREAM, "upstream_model": "bench-model"}],
            "prices": {"input": 0.28, "output": 0.42},
            "max_output_tokens": 4096,
        }
        models["instant"]["max_output_tokens"] = 4096
        models["instant-embed"] = EMBEDDING_MODEL
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    return folder / "config.yaml"


def instructions(driven: Driven, count: int, source: Path | None) -> int:
    command = driven.command(DRIVER, count, "--callgrind-out-file=/dev/null")
    with tempfile.TemporaryDirectory(prefix="tmp-", dir=driven.config.parent) as tmp:
        env, cwd = _environment(source, tmp)
        done = subprocess.run(
            command, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800
        )
    if done.returncode != 0:
        raise SystemExit(f"driver failed:\n{done.stderr[-3000:]}")
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise SystemExit(f"no callgrind total in:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def chat_body(stream: bool) -> bytes:
    """The chat request of the default rows: ten turns of 40 words."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 40} for i in range(9)
    ] + [{"role": "user", "content": "say something"}]
    return json.dumps(
        {"model": "instant", "messages": messages, "stream": stream, "max_tokens": 64}
    ).encode()


# the endpoint rows: (name, path, body), the bodies bench/overhead.py's load sends (its
# unique-prompt slot filled once: no cache is configured here)
def endpoint_requests(stream: bool = False) -> list[tuple[str, str, bytes]]:
    from bench.loadgen import UNIQUE_SLOT
    from bench.overhead import (
        chat_body,
        completions_body,
        embeddings_body,
        messages_body,
        responses_body,
    )

    rows = [
        ("chat", "/v1/chat/completions", chat_body("instant", stream)),
        ("responses", "/v1/responses", responses_body("instant", stream)),
        ("messages-passthrough", "/v1/messages", messages_body(ANTHROPIC_UPSTREAM, stream)),
        ("messages-translated", "/v1/messages", messages_body("instant", stream)),
        ("completions", "/v1/completions", completions_body("instant", stream)),
        ("embeddings", "/v1/embeddings", embeddings_body("instant")),
        # as the official SDK asks, unless told otherwise
        ("embeddings-base64", "/v1/embeddings", embeddings_body("instant", "base64")),
    ]
    return [(name, path, body.replace(UNIQUE_SLOT, b"00000001")) for name, path, body in rows]


ENDPOINTS = [name for name, _, _ in endpoint_requests()]
# the endpoint rows that have stream rows too (embeddings do not stream)
STREAMING = [name for name in ENDPOINTS if not name.startswith("embeddings")]
KINDS = ["non-stream", "stream", "stream-paced"]
TARGETS = ["gateway-lean", "gateway"]
# a counted row: (endpoint, kind, target, instructions a request)
Row = tuple[str, str, str, float]
KIND_NAMES = {
    "non-stream": "non-stream",
    "stream": "32-chunk stream",
    "stream-paced": "32 paced chunks",
}


def request_bytes(stream: bool) -> bytes:
    """The driver's request, over HTTP."""
    body = chat_body(stream)
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
        str(GATEWAY_PYTHON[0]), "-m", "gateway.cli.main", "serve", "--config", str(config),
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


def _names(
    parser: argparse.ArgumentParser, option: str, value: str, allowed: list[str]
) -> list[str]:
    """A comma-separated option's names (or all of them), refused if any is unknown."""
    names = allowed if value == "all" else value.split(",")
    unknown = [name for name in names if name not in allowed]
    if unknown:
        parser.error(f"{option}: unknown {', '.join(unknown)} (of {', '.join(allowed)}, or all)")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--baseline", type=Path, help="an earlier checkout to compare against")
    parser.add_argument(
        "--targets", default="gateway-lean,gateway", help=f"rows to count ({','.join(TARGETS)})"
    )
    parser.add_argument(
        "--kinds", default="non-stream,stream", help=f"rows to count ({','.join(KINDS)})"
    )
    parser.add_argument(
        "--endpoints",
        default="chat",
        help=f"client APIs to count, non-stream (all, or some of {','.join(ENDPOINTS)})",
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
    parser.add_argument(
        "--python",
        type=Path,
        help="the interpreter the gateway runs on (default: this one), a venv's python with\n"
        "the gateway installed; the table's note names its build",
    )
    args = parser.parse_args()
    if args.python is not None:
        GATEWAY_PYTHON[0] = args.python
    targets = _names(parser, "--targets", args.targets, TARGETS)
    kinds = _names(parser, "--kinds", args.kinds, KINDS)
    endpoints = _names(parser, "--endpoints", args.endpoints, ENDPOINTS)
    # chat alone: the rows as they always were; with others, every row sends overhead's
    # bodies (chat's too, so the ratios compare the same prompt)
    by_endpoint = endpoints != ["chat"]
    for option, given in (("--steady", args.steady), ("--endpoints", by_endpoint)):
        if args.served and given:
            parser.error(
                f"{option} drives the app in-process on a clock of 1 ms a request; --served "
                "counts `gateway serve`, whose loop keeps the wall's clock: use one of them"
            )
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    sources: dict[str, Path | None] = {"": None}
    if args.baseline is not None:
        sources["@baseline"] = args.baseline
    for source in sources.values():
        # a checkout's first import compiles its modules: not a cost of any request
        package = (source or REPO) / "gateway"
        compile_all = [str(GATEWAY_PYTHON[0]), "-m", "compileall", "-q", str(package)]
        subprocess.run(compile_all, check=True)
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
            configs[target, paced] = write_config(
                where, upstream_port, store_port, server_port, by_endpoint
            )
    if args.steady:
        # the admin keys' poll (every 100 ms by default) is wall-clock work, not a request's
        for paced in (False, True):
            config = yaml.safe_load(configs["gateway", paced].read_text())
            config["store"]["runtime_keys_poll_ms"] = 5000
            configs["gateway", paced].write_text(yaml.safe_dump(config))
    requests = {
        stream: {name: (path, body) for name, path, body in endpoint_requests(stream)}
        for stream in (False, True)
    }
    # with the endpoint rows, every run first sends each endpoint's request twice (and a
    # chat stream row's own), so no row's count holds first-request costs
    warm = tuple(requests[False].values()) if by_endpoint else ()
    # every row: (label, source, target, endpoint, kind); embeddings rows are non-stream
    plan = [
        (label, source, target, endpoint, kind)
        for label, source in sources.items()
        for target in targets
        for endpoint in endpoints
        for kind in kinds
        if kind == "non-stream" or endpoint in STREAMING
    ]
    rows: list[Row] = []
    bases: dict[tuple[str, str, str], int] = {}  # start-up and warm-up: a row's count for none
    width = 22 if by_endpoint else 18
    try:
        for label, source, target, endpoint, kind in plan:
            stream, paced = kind != "non-stream", kind == "stream-paced"
            config = configs[target, paced]
            if by_endpoint:
                path, body = requests[stream][endpoint]
            else:
                path, body = "/v1/chat/completions", chat_body(stream)
            # a chat stream row's own request is warmed too, with the endpoints'
            own = ((path, body),) if stream and by_endpoint else ()
            driven = Driven(config, path, body, by_endpoint or args.steady, warm + own)
            if server_port is not None:
                total, took = served_instructions(
                    config, args.requests, stream, source, server_port, 0.0
                )
                base, _ = served_instructions(config, 0, stream, source, server_port, took)
                per_request = (total - base) / args.requests
            elif args.steady:
                per_request = steady_instructions(driven, args.requests, source) / args.requests
            else:
                if (label, target, kind) not in bases:
                    bases[label, target, kind] = instructions(driven, 0, source)
                total = instructions(driven, args.requests, source)
                per_request = (total - bases[label, target, kind]) / args.requests
            rows.append((endpoint, kind, target + label, per_request))
            name = _row_name(endpoint, kind, by_endpoint)
            print(f"{name:{width}} {target + label:24} {per_request:>12,.0f}", flush=True)
    finally:
        for service in reversed(services):
            service.stop()
    print()
    summary: dict[str, object] = {
        "requests": args.requests,
        "steady": args.steady,
        "served": args.served,
    }
    if by_endpoint:
        summary["vs_chat"] = _print_by_endpoint(rows, width)
    else:
        print(f"{'scenario':{width}} {'target':24} {'instructions/request':>22}")
        for name, target, value in sorted(
            (KIND_NAMES[kind], target, value) for _, kind, target, value in rows
        ):
            print(f"{name:{width}} {target:24} {value:>22,.0f}")
    per_read = _per_read(rows)
    for target, value in per_read.items():
        print(f"per paced chunk (paced - non-stream) / 33, {target}: {value:,.0f}")
    summary["per_chunk"] = per_read
    print(f"gateway interpreter: {describe_interpreter(GATEWAY_PYTHON[0])}")
    print(json.dumps(summary))


def _print_by_endpoint(rows: list[Row], width: int) -> dict[str, float]:
    """The endpoint rows by target, each with its ratio to chat's row of the same kind
    (the ratios, returned for the JSON line)."""
    chat = {(target, kind): value for endpoint, kind, target, value in rows if endpoint == "chat"}
    order = {name: index for index, name in enumerate(ENDPOINTS)}
    print(f"{'endpoint':{width}} {'target':24} {'instructions/request':>22} {'vs chat':>8}")
    vs_chat: dict[str, float] = {}
    for endpoint, kind, target, value in sorted(
        rows, key=lambda row: (row[2], order[row[0]], KINDS.index(row[1]))
    ):
        ratio = ""
        name = _row_name(endpoint, kind, True)
        if (target, kind) in chat:
            vs_chat[f"{name} {target}"] = round(value / chat[target, kind], 3)
            ratio = f"{value / chat[target, kind]:.2f}"
        print(f"{name:{width}} {target:24} {value:>22,.0f} {ratio:>8}")
    return vs_chat


def _row_name(endpoint: str, kind: str, by_endpoint: bool) -> str:
    """The kind's name; with the endpoint rows, the endpoint's (and the kind's for chat's
    stream rows)."""
    if not by_endpoint:
        return KIND_NAMES[kind]
    return endpoint if kind == "non-stream" else f"{endpoint} {KIND_NAMES[kind]}"


def _per_read(rows: list[Row]) -> dict[str, float]:
    """Each target's relay cost per upstream read: the paced stream's 33 reads (32 chunks
    and the tail) over what a non-stream request costs (chat's rows)."""
    counts = {(kind, target): value for endpoint, kind, target, value in rows if endpoint == "chat"}
    return {
        target: (value - counts[("non-stream", target)]) / 33
        for (kind, target), value in counts.items()
        if kind == "stream-paced" and ("non-stream", target) in counts
    }


if __name__ == "__main__":
    main()
