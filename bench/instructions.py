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

`--endpoints` (default: chat) adds non-stream rows for the other client APIs:
/v1/responses, /v1/messages passed through to an Anthropic-kind provider and translated
to the OpenAI-kind one (bench/upstream.py answers both shapes), /v1/completions and
/v1/embeddings. With any of them, every row (chat's too) sends bench/overhead.py's bodies,
the same prompt in each API's shape, and the config adds overhead's Anthropic provider
and embedding model; each row prints its ratio to the chat row of its target (the issue's
"every endpoint within 10% of chat's"). Every run then first sends each endpoint's
request twice, the count-0 run too, so first-request costs (lazy imports, caches) are
in no row's count, and the event loop's clock moves 1 ms a request, so timers fire by
requests served, not by how slowly callgrind ran them (the same code's chat row read
779,567 and 944,384 instructions in two runs minutes apart before).
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
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import ANTHROPIC_UPSTREAM, BENCH_KEY, free_port, start_redis, upstream

DRIVER = r"""
import asyncio, json, sys
from gateway.api.app import create_app
from gateway.pipeline.runtime import GatewayRuntime
from gateway.settings import load_settings

config, count, stream, key = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
path = sys.argv[5] if len(sys.argv) > 5 else "/v1/chat/completions"
if len(sys.argv) > 6:  # an endpoint row's body, as bench/overhead.py sends it
    body = sys.argv[6].encode()
else:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 40}
                for i in range(9)] + [{"role": "user", "content": "say something"}]
    body = json.dumps({"model": "instant", "messages": messages, "stream": stream,
                       "max_tokens": 64}).encode()
def headers_for(path, body):
    headers = [(b"authorization", b"Bearer " + key.encode()),
               (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if path == "/v1/messages":
        headers.append((b"anthropic-version", b"2023-06-01"))
    return headers
headers = headers_for(path, body)
# warm-up requests, sent before the counted ones in every run (the count-0 run too):
# each endpoint's first-request costs (lazy imports, caches) fall out of the difference
warm = json.loads(open(sys.argv[7]).read()) if len(sys.argv) > 7 else []

# with the endpoint rows, the loop's clock moves 1 ms a request instead of with the wall
# (under callgrind a request takes ~50x as long): the per-second timers of the store,
# the ledger and the admin poll then fire as often in every row, not by how slowly it ran
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
    if warm:
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
    for warm_path, warm_body in warm:
        warm_body = warm_body.encode()
        for _ in range(2):
            await one(app, warm_path, warm_body, headers_for(warm_path, warm_body))
    for _ in range(count):
        await one(app)
    await runtime.stop()

asyncio.run(main())
"""


def write_config(
    folder: Path, upstream_port: int, redis_port: int | None, endpoints: bool = False
) -> Path:
    """A config every checkout since round one can load (bench/processes.py's gateway
    config adds models an older baseline would refuse), so two versions compare. With
    `endpoints`, the endpoint rows' models as bench/processes.py configures them: "claude"
    on an Anthropic-kind provider (the same upstream, which answers /v1/messages itself)
    and "instant-embed", an embedding model on the instant provider."""
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
    if endpoints:
        providers = config["providers"]
        models = policy["models"]
        assert isinstance(providers, dict) and isinstance(models, dict)
        providers[ANTHROPIC_UPSTREAM] = {
            "kind": "anthropic",
            "base_url": f"http://127.0.0.1:{upstream_port}",
            "retry": {"max_attempts": 1},
        }
        models[ANTHROPIC_UPSTREAM] = {
            "deployments": [{"provider": ANTHROPIC_UPSTREAM, "upstream_model": "bench-model"}],
            "prices": {"input": 0.28, "output": 0.42},
            "max_output_tokens": 4096,
        }
        models["instant"]["max_output_tokens"] = 4096
        models["instant-embed"] = {
            "kind": "embedding",
            "deployments": [{"provider": "instant", "upstream_model": "bench-embed"}],
            "prices": {"input": 0.02, "output": 0},
            "capabilities": [],
        }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    return folder / "config.yaml"


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


# the endpoint rows: (name, path, body), the bodies bench/overhead.py's load sends (its
# unique-prompt slot filled once: no cache is configured here)
def endpoint_requests() -> list[tuple[str, str, bytes]]:
    from bench.loadgen import UNIQUE_SLOT
    from bench.overhead import (
        chat_body,
        completions_body,
        embeddings_body,
        messages_body,
        responses_body,
    )

    rows = [
        ("chat", "/v1/chat/completions", chat_body("instant", False)),
        ("responses", "/v1/responses", responses_body("instant", False)),
        ("messages-passthrough", "/v1/messages", messages_body(ANTHROPIC_UPSTREAM, False)),
        ("messages-translated", "/v1/messages", messages_body("instant", False)),
        ("completions", "/v1/completions", completions_body("instant", False)),
        ("embeddings", "/v1/embeddings", embeddings_body("instant")),
    ]
    return [(name, path, body.replace(UNIQUE_SLOT, b"00000001")) for name, path, body in rows]


ENDPOINTS = [name for name, _, _ in endpoint_requests()]


def instructions(
    config: Path,
    count: int,
    stream: bool,
    source: Path | None,
    request: tuple[str, bytes] | None = None,
    warm: Path | None = None,
) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-c", DRIVER, str(config), str(count), "1" if stream else "0", BENCH_KEY,
    ]  # fmt: skip
    if request is not None:
        command += [request[0], request[1].decode()]
        if warm is not None:
            command.append(str(warm))
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
        "--endpoints",
        default="chat",
        help=f"client APIs to count, non-stream (all, or some of {','.join(ENDPOINTS)})",
    )
    args = parser.parse_args()
    endpoints = ENDPOINTS if args.endpoints == "all" else args.endpoints.split(",")
    unknown = set(endpoints) - set(ENDPOINTS)
    if unknown:
        raise SystemExit(f"unknown endpoints: {', '.join(sorted(unknown))}")
    # chat alone: the rows as they always were; with others, every row sends overhead's
    # bodies (chat's too, so the ratios compare the same prompt)
    by_endpoint = endpoints != ["chat"]
    requests = {name: (path, body) for name, path, body in endpoint_requests()}
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
        "gateway-lean": write_config(lean, port, None, by_endpoint),
        "gateway": write_config(full, port, redis_port, by_endpoint),
    }
    # with the endpoint rows, every run first sends each row's request twice, so no row's
    # count holds its endpoint's first-request costs (the count-0 run pays them too)
    warm = None
    if by_endpoint:
        warm = folder / "warm.json"
        warm.write_text(json.dumps([[p, b.decode()] for p, b in requests.values()]))
    sources: dict[str, Path | None] = {"": None}
    if args.baseline is not None:
        sources["@baseline"] = args.baseline
    rows: list[tuple[str, str, float]] = []
    try:
        for label, source in sources.items():
            for target, config in configs.items():
                if target not in args.targets.split(","):
                    continue
                # start-up and imports: the same for every row of a config
                bases: dict[bool, int] = {}
                for endpoint in endpoints:
                    for stream in (False, True):
                        if ("stream" if stream else "non-stream") not in args.kinds.split(","):
                            continue
                        if stream and endpoint != "chat":
                            continue  # the endpoint rows are non-stream
                        request = None
                        if by_endpoint:
                            path, body = requests[endpoint]
                            if stream:
                                body = body.replace(b'"stream": false', b'"stream": true')
                            request = (path, body)
                        if stream not in bases:
                            bases[stream] = instructions(config, 0, stream, source, request, warm)
                        total = instructions(config, args.requests, stream, source, request, warm)
                        per_request = (total - bases[stream]) / args.requests
                        kind = "32-chunk stream" if stream else "non-stream"
                        if by_endpoint:
                            kind = f"{endpoint} {kind}" if stream else endpoint
                        rows.append((kind, target + label, per_request))
                        print(f"{kind:22} {target + label:24} {per_request:>12,.0f}", flush=True)
    finally:
        for service in reversed(services):
            service.stop()
    print()
    if not by_endpoint:
        print(f"{'scenario':18} {'target':24} {'instructions/request':>22}")
        for kind, target, per_request in sorted(rows):
            print(f"{kind:18} {target:24} {per_request:>22,.0f}")
    else:
        chat = {target: count for kind, target, count in rows if kind == "chat"}
        order = {name: index for index, name in enumerate(ENDPOINTS)}
        print(f"{'endpoint':22} {'target':24} {'instructions/request':>22} {'vs chat':>8}")
        for kind, target, per_request in sorted(rows, key=lambda r: (r[1], order.get(r[0], 99))):
            ratio = f"{per_request / chat[target]:.2f}" if target in chat else ""
            print(f"{kind:22} {target:24} {per_request:>22,.0f} {ratio:>8}")
    print(json.dumps({"requests": args.requests}))


if __name__ == "__main__":
    main()
