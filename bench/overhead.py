"""The proxy benchmark: the same closed-loop load straight at the upstream, through
plain nginx, and through the gateway, in one run, printed as one table.

    .venv/bin/python bench/overhead.py [--duration 5] [--repeat 3] [--slow-streams 2000]
        [--gateway-python PATH]
        [--soak N] [--litellm]

Each proxy runs one worker pinned to core 0; the upstreams and the load generator share
core 1 (the issue's set-up on a 2-core machine). The upstream (`bench/upstream.py`)
costs microseconds per request. Targets:

- direct        the upstream itself, no proxy
- nginx         Debian's nginx as a plain reverse proxy (skipped when not installed)
- gateway-lean  ours: auth, routing, metering, metrics and logs; in-memory store
- gateway-traced  gateway-lean with OpenTelemetry tracing on, every request sampled,
                spans exported by OTLP/HTTP to a local collector (bench/otlp_sink.py,
                on the load generator's core); the note says how many spans per
                request the collector received. Its CPU against gateway-lean's is what
                tracing costs when on (the export thread's CPU included)
- gateway       ours with production features on: the same plus Redis admission (rate
                limits, a concurrency lease and a budget reservation in one round trip)
                and the Redis ledger; Redis runs on the load generator's core unless
                --redis-core proxy. Its CPU IS counted in the gateway's CPU column (the
                store is part of what a request costs); the note says how much was Redis
- gateway-2w    the production gateway with `--workers 2`, both workers on the proxy's
                core: they share one core, so its rate is not the point; its CPU per
                request against the one-worker gateway's is (a second worker must not
                make each request dearer). Two cores' capacity estimate = 2 / CPU per
                request, printed in the note (with --targets ...,gateway-2w)
- litellm       LiteLLM's proxy, one worker (with --litellm; installed into its own venv)

The "non-stream, 8 in flight" scenario (gateway targets) is each worker's share when two
workers on two cores serve the 16: its note on the one-worker gateway's row is two cores'
capacity against one worker's by CPU accounting, 2 x CPU(16) / CPU(8), without the shared
core of the gateway-2w rows. Each of its runs is paired with a 16-in-flight run just
before it (this VM's speed drifts by 10-50% over minutes, and rows of one scenario are
minutes apart), and the note gives the median pair's ratio.

The "route auto" and "route auto-learned" scenarios (gateway targets) send the non-stream
request to the shipped routes' two strategies, over a strong and a cheap tier on the
instant upstream (bench/processes.py: ROUTE_TIERS, BENCH_ROUTES): what planning a route
costs beside the concrete model of the first row, and what the learned scorer adds to
it. The note says where the route sent the requests and how many a learned route planned
without a score (its scorer saturated or failed).

The "+ 5 MB prompts" scenario (gateway targets; --large-prompts 0 skips it) is the
non-stream scenario with 5 MB prompts of one repeated character (the worst case for BPE
token counting) arriving among the normal traffic, --large-prompts of them in flight at a
time; the row beside it is the same load without them, and its note compares the normal
requests' p99.

The "cache miss" and "cache hit" scenarios (gateway targets) send the non-stream request
to the `cached` route (the instant upstream behind the response cache, bench/processes.py):
every request differs in the miss row (each is looked up, served upstream and stored),
and every request is the same in the hit row (all but the first are answered from the
cache, without admission or an upstream call). Beside the first row, they price the
cache's lookup and write, and what a hit costs instead of a proxied request.

The `/v1/messages` rows send the same prompt in Anthropic's Messages format: to the
"claude" model (an Anthropic provider: the gateway's same-API passthrough) and to an
OpenAI-compatible model (translated to chat and back). "direct" for them is the
upstream answering the same request itself (Anthropic-shaped for the passthrough).
LiteLLM's rows use its own /v1/messages, translating for both (its models are
configured as OpenAI-compatible).

Errors are counted and shown, never averaged away.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.loadgen import UNIQUE_SLOT, Result, build_request, run_load
from bench.processes import (
    ANTHROPIC_UPSTREAM,
    BENCH_KEY,
    BENCH_ROUTES,
    Service,
    cpu_seconds,
    describe_interpreter,
    free_port,
    gateway,
    memory_bytes,
    nginx,
    otlp_sink,
    spans_received,
    start_redis,
    traced_env,
    upstream,
)

# ~2 KB: a 1.6 KB system prompt shared by every request, and a user message that differs
# in every request (the load generator fills the @@@@@@@@ slot with a counter)
SYSTEM = ("You are a helpful assistant that answers questions about routing. " * 25)[:1600]
USER = "Question @@@@@@@@: " + "how should this request be routed and what will it cost? " * 7
PROXY_CORE, LOAD_CORE = 0, 1
LARGE_SCENARIO = "non-stream, 16 in flight + 5 MB prompts"
FULL_SCENARIO = "non-stream, 16 in flight"
HALF_SCENARIO = "non-stream, 8 in flight"
REDIS_CORE = {"load": LOAD_CORE, "proxy": PROXY_CORE}


@dataclass
class Scenario:
    name: str
    upstream: str  # which upstream: instant, delayed, slow
    stream: bool
    concurrency: int
    requests: int | None = None  # a fixed number instead of a duration
    # which API the load speaks: chat completions, legacy completions, the Responses API,
    # embeddings (floats, or "embeddings-base64": as the official SDK asks), or "anthropic":
    # an Anthropic Messages body to /v1/messages
    api: str = "chat"
    # this many 5 MB prompts in flight beside the normal traffic (gateway targets only)
    large_prompts: int = 0
    # run against the gateway's targets only
    gateway_only: bool = False
    # the model the body asks for, when not the upstream's own (a route's name)
    model: str | None = None
    # every request the same (no counter in the prompt): the response cache's hit row
    repeated: bool = False


@dataclass
class Row:
    scenario: str
    target: str
    result: Result
    cpu_us: float | None
    rss_mb: float | None
    notes: list[str] = field(default_factory=list)
    # the part of cpu_us that was Redis's
    redis_us: float = 0.0
    # the 8-in-flight row: each run paired with a 16-in-flight run just before it, as
    # (CPU at 16, Redis's part, CPU at 8, Redis's part): the machine's speed drifts
    # between rows measured minutes apart, not within a pair
    pairs: list[tuple[float, float, float, float]] = field(default_factory=list)


def chat_body(model: str, stream: bool) -> bytes:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
        "max_tokens": 64,
        "stream": stream,
    }
    return json.dumps(body).encode()


def responses_body(model: str, stream: bool) -> bytes:
    """The chat body's content as a Responses request (stored: false, as a stateless
    client sends it, so the row measures the codec and the pipeline, not the store)."""
    body: dict[str, object] = {
        "model": model,
        "instructions": SYSTEM,
        "input": USER,
        "max_output_tokens": 64,
        "stream": stream,
        "store": False,
    }
    return json.dumps(body).encode()


def messages_body(model: str, stream: bool) -> bytes:
    """The chat request's prompt as an Anthropic Messages request."""
    body: dict[str, object] = {
        "model": model,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": USER}],
        "max_tokens": 64,
        "stream": stream,
    }
    return json.dumps(body).encode()


def completions_body(model: str, stream: bool) -> bytes:
    """The chat request's prompt as a legacy completions request (the bench's upstream
    speaks chat only, so the row measures the translation to chat and back)."""
    body: dict[str, object] = {
        "model": model,
        "prompt": f"{SYSTEM}\n\n{USER}",
        "max_tokens": 64,
        "stream": stream,
    }
    return json.dumps(body).encode()


def embeddings_body(model: str, encoding_format: str | None = None) -> bytes:
    """The chat request's question to embed; `encoding_format` "base64" is what the
    official SDK sends unless told otherwise (floats when it is not said)."""
    body: dict[str, object] = {"model": model + "-embed", "input": USER}
    if encoding_format is not None:
        body["encoding_format"] = encoding_format
    return json.dumps(body).encode()


def request_for(scenario: Scenario) -> tuple[str, bytes]:
    model = scenario.model or scenario.upstream
    if scenario.api == "responses":
        return "/v1/responses", responses_body(model, scenario.stream)
    if scenario.api == "embeddings":
        return "/v1/embeddings", embeddings_body(model)
    if scenario.api == "embeddings-base64":
        return "/v1/embeddings", embeddings_body(model, "base64")
    if scenario.api == "completions":
        return "/v1/completions", completions_body(model, scenario.stream)
    if scenario.api == "anthropic":
        return "/v1/messages", messages_body(model, scenario.stream)
    return "/v1/chat/completions", chat_body(model, scenario.stream)


LARGE_PROMPT_BYTES = 5_000_000


def large_body(model: str) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": "a" * LARGE_PROMPT_BYTES}]}
    return json.dumps(body).encode()


def measure(
    port: int, scenario: Scenario, duration: float, auth: bool
) -> tuple[Result, Result | None]:
    """The scenario's load; with `large_prompts`, the 5 MB prompts' own result beside it."""
    headers = {"Authorization": f"Bearer {BENCH_KEY}"} if auth else {}
    if scenario.api == "anthropic":
        headers["anthropic-version"] = "2023-06-01"
    path, body = request_for(scenario)
    if scenario.repeated:
        body = body.replace(UNIQUE_SLOT, b"repeated")
    request = build_request("127.0.0.1", port, path, body, headers)
    load = run_load(
        "127.0.0.1",
        port,
        request,
        scenario.concurrency,
        duration if scenario.requests is None else 3600,
        max_requests=scenario.requests,
        warmup=0.5 if scenario.requests is None else 0.0,
    )
    if not scenario.large_prompts:
        return asyncio.run(load), None
    large = build_request(
        "127.0.0.1", port, "/v1/chat/completions", large_body(scenario.upstream), headers
    )

    async def both() -> tuple[Result, Result]:
        big = run_load("127.0.0.1", port, large, scenario.large_prompts, duration, warmup=0.5)
        normal, heavy = await asyncio.gather(load, big)
        return normal, heavy

    return asyncio.run(both())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--slow-streams", type=int, default=2000, help="0 to skip")
    parser.add_argument(
        "--slow-interval-ms", type=float, default=20.0, help="token interval of the slow streams"
    )
    parser.add_argument("--slow-tokens", type=int, default=500, help="tokens per slow stream")
    parser.add_argument("--soak", type=int, default=0, help="requests for the RSS soak (0: skip)")
    parser.add_argument(
        "--large-prompts", type=int, default=1, help="5 MB prompts in flight (0: skip)"
    )
    parser.add_argument("--litellm", action="store_true", help="also measure LiteLLM's proxy")
    parser.add_argument(
        "--redis-core",
        choices=sorted(REDIS_CORE),
        default="load",
        help="where Redis runs: beside the load generator (a shared service has its own\n"
        "machine in production) or on the proxy's core, competing with the gateway",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per measurement; the median run is shown"
    )
    parser.add_argument("--targets", default="direct,nginx,gateway-lean,gateway-traced,gateway")
    parser.add_argument(
        "--scenarios",
        help="|-separated substrings: run only the scenarios whose name has one",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of an earlier gateway (e.g. a git worktree): adds the targets\n"
        "gateway@baseline and gateway-lean@baseline, run from that source in the same run",
    )
    parser.add_argument(
        "--gateway-python",
        type=Path,
        help="the interpreter every gateway target runs on (default: this one); a venv's\n"
        "python with the gateway installed. The table's note names its build",
    )
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {LOAD_CORE})
    targets = args.targets.split(",") + (["litellm"] if args.litellm else [])
    if args.baseline is not None:
        targets += [f"{t}@baseline" for t in targets if t in ("gateway", "gateway-lean")]

    scenarios = [
        Scenario(FULL_SCENARIO, "instant", False, 16),
        *(
            [Scenario(LARGE_SCENARIO, "instant", False, 16, large_prompts=args.large_prompts)]
            if args.large_prompts
            else []
        ),
        Scenario("32-chunk stream, 16 in flight", "instant", True, 16),
        Scenario("50 ms upstream, 256 in flight", "delayed", False, 256),
        Scenario("one at a time", "instant", False, 1),
        # each worker's share of the 16 when two workers serve them on two cores
        Scenario(HALF_SCENARIO, "instant", False, 8, gateway_only=True),
        # the shipped routes' planning cost beside a concrete model's (the row above them)
        *(
            Scenario(
                f"non-stream, 16, route {route}",
                "instant",
                False,
                16,
                gateway_only=True,
                model=route,
            )
            for route in BENCH_ROUTES
            if route != "cached"
        ),
        Scenario(
            "non-stream, 16, cache miss", "instant", False, 16, gateway_only=True, model="cached"
        ),
        Scenario(
            "non-stream, 16, cache hit",
            "instant",
            False,
            16,
            gateway_only=True,
            model="cached",
            repeated=True,
        ),
        Scenario("/v1/responses non-stream, 16 in flight", "instant", False, 16, api="responses"),
        Scenario("/v1/responses 32-chunk stream, 16", "instant", True, 16, api="responses"),
        Scenario("/v1/embeddings, 16 in flight", "instant", False, 16, api="embeddings"),
        Scenario(
            "/v1/embeddings base64 (the SDK's default), 16",
            "instant",
            False,
            16,
            api="embeddings-base64",
        ),
        Scenario("/v1/completions non-stream, 16", "instant", False, 16, api="completions"),
        Scenario("/v1/completions 32-chunk stream, 16", "instant", True, 16, api="completions"),
        Scenario(
            "messages passthrough, 16 in flight", ANTHROPIC_UPSTREAM, False, 16, api="anthropic"
        ),
        Scenario("messages translated, 16 in flight", "instant", False, 16, api="anthropic"),
        Scenario("messages passthrough stream, 16", ANTHROPIC_UPSTREAM, True, 16, api="anthropic"),
        Scenario("messages translated stream, 16", "instant", True, 16, api="anthropic"),
    ]
    if args.scenarios:
        wanted = args.scenarios.split("|")
        scenarios = [s for s in scenarios if any(w in s.name for w in wanted)]
    if args.slow_streams:
        scenarios.append(
            Scenario(
                f"{args.slow_streams} slow streams ({args.slow_interval_ms:g} ms/token, "
                f"{args.slow_tokens * args.slow_interval_ms / 1000:g} s)",
                "slow",
                True,
                args.slow_streams,
                requests=args.slow_streams,
            )
        )
    if args.soak:
        scenarios.append(Scenario(f"soak, {args.soak} requests", "instant", False, 16, args.soak))

    ports = {"instant": free_port(), "delayed": free_port(), "slow": free_port()}
    # the Anthropic provider is the instant upstream answering /v1/messages itself
    ports[ANTHROPIC_UPSTREAM] = ports["instant"]
    upstreams = [
        upstream(ports["instant"], LOAD_CORE, "--chunks", "32"),
        upstream(ports["delayed"], LOAD_CORE, "--delay-ms", "50"),
        upstream(
            ports["slow"],
            LOAD_CORE,
            "--chunks",
            str(args.slow_tokens),
            "--chunk-interval-ms",
            str(args.slow_interval_ms),
        ),
    ]
    for service in upstreams:
        service.start()
    rows: list[Row] = []
    services: list[Service] = list(upstreams)
    try:
        for target in targets:
            rows.extend(
                run_target(
                    target,
                    scenarios,
                    ports,
                    args.duration,
                    services,
                    args.repeat,
                    args.redis_core,
                    args.baseline,
                    args.gateway_python,
                )
            )
    finally:
        for service in reversed(services):
            service.stop()
    note_two_workers(rows)
    print_table(rows)
    if any(target.startswith("gateway") for target in targets):
        print(f"gateway interpreter: {describe_interpreter(args.gateway_python)}")


def note_two_workers(rows: list[Row]) -> None:
    """Beside each gateway-2w row: what two cores would serve against one worker on one,
    by CPU accounting (each worker on its own core pays its CPU per request). Both
    workers here share one core, so the ratio also carries their time-slicing, which two
    cores would not have: it errs low.

    Beside the one-worker gateway's 8-in-flight row, the other estimate: two workers on
    two cores serving 16 in flight each serve 8, at the CPU per request one worker pays
    at 8 in flight, so two cores serve 2 x CPU(16) / CPU(8) of one worker's rate."""
    one = {r.scenario: r for r in rows if r.target == "gateway" and r.cpu_us}
    for row in rows:
        single = one.get(row.scenario)
        if row.target == "gateway-2w" and row.cpu_us and single and single.cpu_us:
            row.notes.insert(1, f"x{2 * single.cpu_us / row.cpu_us:.2f} one worker's capacity")
        full = one.get(FULL_SCENARIO)
        if row.target == "gateway" and row.scenario == HALF_SCENARIO and row.cpu_us:
            if not row.pairs and full and full.cpu_us:
                row.pairs = [(full.cpu_us, full.redis_us, row.cpu_us, row.redis_us)]
            if not row.pairs:
                continue
            # the workers' cores do not run Redis (a shared service has its own machine)
            both = sorted(2 * c16 / c8 for c16, _, c8, _ in row.pairs)
            apart = sorted(2 * (c16 - r16) / (c8 - r8) for c16, r16, c8, r8 in row.pairs)
            middle = len(both) // 2
            row.notes.insert(
                0,
                f"two cores at 16 in flight, 8 each: x{both[middle]:.2f} one worker, "
                f"x{apart[middle]:.2f} with Redis's CPU elsewhere"
                + (
                    f" (median of {len(both)} pairs of runs at 16 and 8 in turn: "
                    f"{', '.join(f'x{r:.2f}' for r in both)})"
                    if len(both) > 1
                    else ""
                ),
            )


def run_target(
    target: str,
    scenarios: list[Scenario],
    upstream_ports: dict[str, int],
    duration: float,
    services: list[Service],
    repeat: int = 1,
    redis_core: str = "load",
    baseline: Path | None = None,
    gateway_python: Path | None = None,
) -> list[Row]:
    proxy: Service | None = None
    store: Service | None = None
    sink_port: int | None = None
    port_for: Callable[[Scenario], int]
    if target == "direct":
        port_for = lambda s: upstream_ports[s.upstream]  # noqa: E731
    elif target == "nginx":
        listen = {name: free_port() for name in upstream_ports}
        proxy = nginx({listen[n]: p for n, p in upstream_ports.items()}, PROXY_CORE)
        if proxy is None:
            print("nginx: not installed (apt-get install nginx-light); skipped", file=sys.stderr)
            return []
        port_for = lambda s: listen[s.upstream]  # noqa: E731
    elif target.split("@")[0] in ("gateway", "gateway-lean", "gateway-2w", "gateway-traced"):
        redis_port = None
        env = None
        if target == "gateway-traced":
            sink_port = free_port()
            services.append(otlp_sink(sink_port, LOAD_CORE).start())
            env = traced_env(sink_port)
        elif target.split("@")[0] != "gateway-lean":
            redis_port = free_port()
            store = start_redis(redis_port, REDIS_CORE[redis_core])
            services.append(store)
        port = free_port()
        source = baseline if target.endswith("@baseline") else None
        workers = 2 if target.split("@")[0] == "gateway-2w" else 1
        proxy = gateway(
            port,
            upstream_ports,
            PROXY_CORE,
            redis_port=redis_port,
            source=source,
            workers=workers,
            env=env,
            python=gateway_python,
        )
        port_for = lambda s: port  # noqa: E731
    elif target == "litellm":
        from bench.litellm_target import litellm

        port = free_port()
        proxy = litellm(port, upstream_ports, PROXY_CORE, BENCH_KEY)
        port_for = lambda s: port  # noqa: E731
    else:
        raise SystemExit(f"unknown target {target}")
    if proxy is not None:
        # a loaded machine can take more than 30 s to import and bind two workers
        services.append(proxy.start(timeout=120))
    rows: list[Row] = []
    try:
        for scenario in scenarios:
            if target == "litellm" and scenario.api not in ("chat", "anthropic"):
                # its config (bench/litellm_target.py) has chat models only (its own
                # /v1/messages translates Messages requests to them)
                continue
            if (scenario.large_prompts or scenario.gateway_only) and not target.startswith(
                "gateway"
            ):
                continue  # the scenario is about the gateway's token counting
            if scenario.model and target.endswith("@baseline"):
                continue  # the bench's routes are the current source's (bench/processes.py)
            # a fixed-count scenario (slow streams, soak) runs once: it is long already
            runs = 1 if scenario.requests else repeat
            partner = next((s for s in scenarios if s.name == FULL_SCENARIO), None)
            pairs: list[tuple[float, float, float, float]] = []
            measured = []
            for _ in range(runs):
                if scenario.name == HALF_SCENARIO and target == "gateway" and partner:
                    # the two-core estimate's other half, measured just before this run
                    sixteen = measure_once(
                        target, proxy, partner, port_for(partner), duration, store
                    )
                spans_before = spans_received(sink_port) if sink_port else 0
                run = measure_once(target, proxy, scenario, port_for(scenario), duration, store)
                if sink_port:
                    run.notes.append(spans_note(sink_port, spans_before, run))
                measured.append(run)
                if scenario.name == HALF_SCENARIO and target == "gateway" and partner:
                    assert sixteen.cpu_us is not None and run.cpu_us is not None
                    pairs.append((sixteen.cpu_us, sixteen.redis_us, run.cpu_us, run.redis_us))
            # the median run by throughput; the others' spread is shown, not hidden
            measured.sort(key=lambda row: row.result.rate)
            row = measured[len(measured) // 2]
            row.pairs = pairs
            if runs > 1:
                rates = [f"{m.result.rate:.0f}" for m in measured]
                row.notes.insert(0, f"median of {runs} runs (req/s {', '.join(rates)})")
            if scenario.large_prompts:
                row.notes.insert(0, _versus_without(row, rows))
            rows.append(row)
    finally:
        if proxy is not None:
            proxy.stop()
    return rows


def spans_note(sink_port: int, before: int, row: Row) -> str:
    """Spans the collector received per request of the run (after the exporter's last
    batch: a 200 ms schedule, waited for)."""
    time.sleep(0.6)
    result = row.result
    served = max(1, result.count + result.errors + result.warmup)
    return f"{(spans_received(sink_port) - before) / served:.1f} spans/request exported"


def _versus_without(row: Row, earlier: list[Row]) -> str:
    """The normal requests' p99 with the 5 MB prompts against the run without them."""
    without = next((r for r in earlier if r.scenario == "non-stream, 16 in flight"), None)
    if without is None or not without.result.latencies or not row.result.latencies:
        return "no run without 5 MB prompts to compare"
    p99, base = row.result.percentile(99) * 1000, without.result.percentile(99) * 1000
    return f"normal p99 {p99:.2f} ms vs {base:.2f} ms without them (x{p99 / base:.2f})"


def redis_calls(store: Service) -> tuple[int, int] | None:
    """The store's script calls and commands so far (`INFO commandstats`; a script's own
    commands count too): how well the gateway batches shows in their count a request,
    which one request at a time under callgrind cannot show."""
    port = int(store.command[store.command.index("--port") + 1])
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        stats = client.info("commandstats")
    except redis.RedisError:
        return None
    finally:
        client.close()
    calls = {name: int(value["calls"]) for name, value in stats.items()}
    scripts = sum(n for name, n in calls.items() if name in ("cmdstat_evalsha", "cmdstat_eval"))
    return scripts, sum(calls.values())


def measure_once(
    target: str,
    proxy: Service | None,
    scenario: Scenario,
    port: int,
    duration: float,
    store: Service | None = None,
) -> Row:
    if proxy is None:
        result, _ = measure(port, scenario, duration, auth=False)
        return Row(scenario.name, target, result, None, None)
    rss_before = memory_bytes(proxy.pid)
    own_before = overhead_histogram(port) if target != "litellm" else None
    mix_before = route_mix(port, scenario.model) if scenario.model else None
    cpu_before = cpu_seconds(proxy.pid)
    store_before = cpu_seconds(store.pid) if store is not None else 0.0
    calls_before = redis_calls(store) if store is not None else None
    result, large = measure(port, scenario, duration, auth=True)
    cpu = cpu_seconds(proxy.pid) - cpu_before
    store_cpu = cpu_seconds(store.pid) - store_before if store is not None else 0.0
    calls_after = redis_calls(store) if store is not None else None
    own_after = overhead_histogram(port) if own_before else None
    # the CPU counters ran through the warm-up too: its requests count against them
    served = max(1, result.count + result.errors + result.warmup)
    per_request = (cpu + store_cpu) / served * 1e6
    row = Row(scenario.name, target, result, per_request, memory_bytes(proxy.pid, "VmHWM") / 1e6)
    if store is not None:
        row.redis_us = store_cpu / served * 1e6
        row.notes.append(f"of which Redis {row.redis_us:.0f} us")
    if calls_before is not None and calls_after is not None:
        scripts = calls_after[0] - calls_before[0]
        commands = calls_after[1] - calls_before[1]
        row.notes.append(
            f"Redis a request: {scripts / served:.2f} script calls, {commands / served:.1f} "
            "commands"
        )
    if target.startswith("gateway-2w"):
        row.notes.append(f"2-core capacity ~{2 / (per_request / 1e6):.0f} req/s")
    if scenario.model and mix_before is not None:
        row.notes.append(mix_note(mix_before, route_mix(port, scenario.model)))
    if own_before and own_after:
        row.notes.append(own_before.report_until(own_after))
    if large is not None:
        answered = ", ".join(f"{n} x {status}" for status, n in sorted(large.statuses.items()))
        failed = large.errors - sum(n for status, n in large.statuses.items() if status != 200)
        row.notes.append(f"5 MB prompts answered: {answered or 'none'}; {failed} failed")
    if scenario.requests and scenario.name.startswith("soak"):
        after = memory_bytes(proxy.pid)
        row.notes.append(f"RSS {rss_before / 1e6:.0f} -> {after / 1e6:.0f} MB")
    return row


@dataclass
class Histogram:
    """One scrape of the gateway's own `gateway_overhead_seconds` (all label sets summed):
    the cross-check of the harness's client-side "added" columns."""

    buckets: dict[float, float]
    total: float
    count: float

    def report_until(self, later: Histogram) -> str:
        count = later.count - self.count
        if count <= 0:
            return "gateway_overhead_seconds: no observations"
        cumulative = sorted(
            (le, later.buckets[le] - self.buckets.get(le, 0)) for le in later.buckets
        )
        mean_ms = (later.total - self.total) / count * 1000
        return (
            f"in-gateway overhead p50 {_quantile(cumulative, 0.5) * 1000:.2f} ms, "
            f"p99 {_quantile(cumulative, 0.99) * 1000:.2f} ms, mean {mean_ms:.2f} ms"
        )


def _quantile(cumulative: list[tuple[float, float]], q: float) -> float:
    """Prometheus's histogram_quantile: linear within the bucket the rank falls in."""
    rank = q * cumulative[-1][1]
    lower_le, lower_count = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if le == float("inf"):
                return lower_le
            width = count - lower_count
            return lower_le + (le - lower_le) * ((rank - lower_count) / width if width else 0)
        lower_le, lower_count = le, count
    return lower_le


def route_mix(port: int, route: str) -> dict[str, float]:
    """A route's finished requests so far by model, and (key "") those a learned route
    planned without a score, from the gateway's /metrics."""
    mix: dict[str, float] = {}
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if f'route="{route}"' not in name:
            continue
        if name.startswith("gateway_requests_total{"):
            model = name.split('model="', 1)[1].split('"', 1)[0]
            mix[model] = mix.get(model, 0.0) + float(value)
        elif name.startswith("gateway_learned_fallbacks_total{"):
            mix[""] = mix.get("", 0.0) + float(value)
    return mix


def mix_note(before: dict[str, float], after: dict[str, float]) -> str:
    served = {model: n - before.get(model, 0.0) for model, n in after.items()}
    unscored = served.pop("", 0.0)
    total = sum(served.values()) or 1
    shares = ", ".join(f"{model} {n / total:.0%}" for model, n in sorted(served.items()))
    return f"{shares}; {unscored:.0f} planned without a score"


def overhead_histogram(port: int) -> Histogram | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    buckets: dict[float, float] = {}
    total = count = 0.0
    for line in text.splitlines():
        if not line.startswith("gateway_overhead_seconds"):
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith("gateway_overhead_seconds_bucket"):
            le = float(name.split('le="', 1)[1].split('"', 1)[0])
            buckets[le] = buckets.get(le, 0) + float(value)
        elif name.startswith("gateway_overhead_seconds_sum"):
            total += float(value)
        elif name.startswith("gateway_overhead_seconds_count"):
            count += float(value)
    return Histogram(buckets, total, count) if buckets else None


def print_table(rows: list[Row]) -> None:
    header = (
        f"{'scenario':42} {'target':12} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'added p50':>10} {'added p99':>10} {'errors':>7} {'CPU us/req':>10} {'peak RSS':>9}"
    )
    print(header)
    print("-" * len(header))
    direct: dict[str, Result] = {r.scenario: r.result for r in rows if r.target == "direct"}
    for row in rows:
        result = row.result
        p50, p99 = result.percentile(50) * 1000, result.percentile(99) * 1000
        base = direct.get(row.scenario)
        added50 = added99 = ""
        if base is not None and row.target != "direct":
            added50 = f"+{p50 - base.percentile(50) * 1000:.2f}"
            added99 = f"+{p99 - base.percentile(99) * 1000:.2f}"
        cpu = f"{row.cpu_us:.0f}" if row.cpu_us is not None else ""
        rss = f"{row.rss_mb:.0f} MB" if row.rss_mb is not None else ""
        errors = f"{result.errors}" + (" !" if result.errors else "")
        print(
            f"{row.scenario:42} {row.target:12} {result.rate:8.0f} {p50:8.2f} {p99:8.2f} "
            f"{added50:>10} {added99:>10} {errors:>7} {cpu:>10} {rss:>9}"
            + ("  " + "; ".join(row.notes) if row.notes else "")
        )


if __name__ == "__main__":
    main()
