"""Replica balancing and continuous batching, measured on emulated SGLang replicas.

    .venv/bin/python bench/batching.py                  # 4 h100 replicas, all balancers
    .venv/bin/python bench/batching.py --loads 20,40 --balancers round_robin,prefix_affinity
    .venv/bin/python bench/batching.py --through-gateway  # a `gateway serve` per run
    .venv/bin/python bench/batching.py --via-gateway http://127.0.0.1:8080 --model llama \
        --api-key sk-... --base-port 30000              # through a running gateway
    .venv/bin/python bench/batching.py --backend llamacpp  # real llama-server replicas
                                                          # beside matched emulators

What it does
------------
1. Starts N emulator replicas (`python -m gateway.emulator`, h100 profile, time-scaled),
   fresh for every run so each balancer starts with cold caches.
2. Replays a shared-prefix workload in the spirit of SGLang's generated-shared-prefix
   benchmark: `--prompts` system prompts of 1-4k tokens, each used by many users, every
   request a distinct question under one of them, Poisson arrivals at each `--loads` rate.
3. Sends every request through `gateway.pools.ReplicaPool` with the balancer under test
   (the in-flight limits, fair queue, health checks and scrapes the gateway uses) and
   httpx, streaming; with `--through-gateway`, through a `gateway serve` started for
   each run, whose one provider is a pool over the fleet with the balancer under test
   (rows `gateway/<balancer>`); or through a running gateway with `--via-gateway`.
4. Prints one table: output tokens/s, TTFT p50/p99, end-to-end p99, prefix-cache hit rate
   (cached / prompt tokens, from each response's usage) and requests refused; then the
   prefix_affinity/round_robin ratios and continuous vs static batching on one replica.

With `--backend llamacpp` the replicas are real llama.cpp servers (`make real-backend`
builds them) over the tiny seeded model, each run through a `gateway serve` whose pool
has `metrics_style: llamacpp` (its cap: the servers' slot count), and every row is
repeated on emulator replicas matched to them: as many replicas, `--max-running-requests`
= slots, the same KV cells (slots x context per slot), the same reply length, and a time
scale calibrated so that the emulated GPU decodes one sequence as fast as llama-server
does. Times in those rows are wall seconds; the table shows where the emulator's model
of a continuous-batching server agrees with a real one and where it does not.

All times are emulated GPU time: wall time divided by `--time-scale`. The client's own
overhead is scaled up with it, so keep the time scale modest on a small machine.

The default KV cache (`--kv-cache-tokens`, 64k tokens a replica) is smaller than an
H100's on purpose: the prompts' prefix working set (32 x ~2.5k = ~80k tokens) then
overflows one replica's cache but fits in the pool's, the regime in which placement
decides the hit rate. With the profile's full 400k every replica caches every prompt and
all balancers converge; pass `--kv-cache-tokens 0` to see that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import Service, free_port
from gateway.emulator.profiles import profile_named
from gateway.errors import GatewayError
from gateway.pools import ReplicaPool
from gateway.routing.balancing import BoundedLoad, balance_request, build_balancer
from gateway.settings.server import ReplicaPoolSettings
from gateway.wire.openai import ChatRequest, Message, Role
from tools.llamacpp.build import Layout, finished_build, why_not_built
from tools.llamacpp.replicas import ServerOptions, running_replicas
from tools.llamacpp.tiny_model import tiny_model

ROOT = str(Path(__file__).resolve().parents[1])
BALANCERS = ("round_robin", "least_load", "prefix_affinity")
MODEL = "emulated-model"
GATEWAY_KEY = "gw-bench-batching"
GATEWAY_PROVIDER = "gpu-pool"
# a pooled keep-alive connection found closed before the request got an answer: sent
# again once, as the OpenAI SDKs do
RESENDABLE = ("ReadError before the response", "RemoteProtocolError before the response")
# the emulator's approx tokenizer: one token per 4 bytes
BYTES_PER_TOKEN = 4
_VOCABULARY = tuple(
    [
        "policy",
        "invoice",
        "shipment",
        "refund",
        "account",
        "ledger",
        "contract",
        "warranty",
        "region",
        "tariff",
        "customer",
        "support",
        "escalation",
        "priority",
        "outage",
        "latency",
        "compliance",
        "audit",
        "retention",
        "schema",
        "pipeline",
        "dashboard",
        "forecast",
        "inventory",
        "supplier",
        "payment",
        "dispute",
        "threshold",
    ]
)


# ---------------------------------------------------------------- workload


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    at: float  # emulated seconds after the run starts
    system: int
    messages: tuple[tuple[Role, str], ...]
    max_tokens: int
    tenant: str

    def body(self, model: str, extra: dict[str, object] | None = None) -> dict[str, object]:
        return {
            "model": model,
            "messages": [{"role": role, "content": text} for role, text in self.messages],
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **(extra or {}),
        }

    def chat(self, model: str) -> ChatRequest:
        return ChatRequest(
            model=model,
            messages=[Message(role=role, content=text) for role, text in self.messages],
            max_tokens=self.max_tokens,
        )


def words(rng: random.Random, tokens: int) -> str:
    text: list[str] = []
    size = 0
    while size < tokens * BYTES_PER_TOKEN:
        word = rng.choice(_VOCABULARY)
        text.append(word)
        size += len(word) + 1
    return " ".join(text)


def system_prompts(count: int, low: int, high: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"You are agent {n} of the operations team. " + words(rng, rng.randint(low, high))
        for n in range(count)
    ]


def workload(
    prompts: Sequence[str],
    rate: float,
    count: int,
    args: argparse.Namespace,
    seed: int,
    output_tokens: int,
) -> list[PlannedRequest]:
    """`count` requests, Poisson arrivals at `rate` per emulated second (inf: all at once)."""
    rng = random.Random(seed)
    at = 0.0
    planned = []
    for n in range(count):
        if math.isfinite(rate):
            at += rng.expovariate(rate)
        system = rng.randrange(len(prompts))
        question = f"Request {n}: " + words(rng, rng.randint(32, args.question_tokens))
        planned.append(
            PlannedRequest(
                at=at,
                system=system,
                messages=(("system", prompts[system]), ("user", question)),
                max_tokens=output_tokens,
                tenant=f"team-{system % 4}",
            )
        )
    return planned


# ---------------------------------------------------------------- emulators


@dataclass
class Fleet:
    """Emulator processes on 127.0.0.1; a context manager that always stops them."""

    count: int
    extra_args: list[str]
    base_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    def __enter__(self) -> Fleet:
        for n in range(self.count):
            port = self.base_port + n if self.base_port else free_port()
            command = [sys.executable, "-m", "gateway.emulator", "--port", str(port)]
            command += self.extra_args
            log = tempfile.NamedTemporaryFile(
                prefix=f"emulator-{port}-", suffix=".log", delete=False
            )
            self.logs.append(log)
            process = subprocess.Popen(command, stdout=log, stderr=log, cwd=ROOT)
            self.processes.append(process)
            self.urls.append(f"http://127.0.0.1:{port}/v1")
        for url, process, log_file in zip(self.urls, self.processes, self.logs, strict=True):
            wait_until_up(url.removesuffix("/v1"), process, log_file.name)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for log_file in self.logs:
            log_file.close()
            if os.path.getsize(log_file.name):
                print(f"    emulator log kept: {log_file.name}", file=sys.stderr)
            else:
                os.unlink(log_file.name)


def wait_until_up(root: str, process: subprocess.Popen[bytes], log: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"emulator at {root} exited; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{root}/health", timeout=1).is_success:
                return
        time.sleep(0.1)
    raise RuntimeError(f"emulator at {root} did not come up within 30 s")


def emulator_args(
    args: argparse.Namespace, kv_cache_tokens: int, static: bool = False
) -> list[str]:
    # one seed everywhere: a prompt gets the same reply length on any replica
    extra = ["--profile", args.profile, "--time-scale", str(args.time_scale), "--seed", "0"]
    if kv_cache_tokens:
        extra += ["--kv-cache-tokens", str(kv_cache_tokens)]
    if static:
        extra.append("--static-batching")
    return extra


# ---------------------------------------------------------------- driving


@dataclass(slots=True)
class Outcome:
    ttft: float | None = None  # wall seconds
    latency: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    refused: bool = False
    failed: str | None = None
    replica: str = ""
    finished_at: float = 0.0  # wall seconds since the run started


class Target:
    """Where requests go: a pool of replicas in process, or a gateway over HTTP."""

    async def call(self, client: httpx.AsyncClient, planned: PlannedRequest) -> Outcome:
        raise NotImplementedError


class PoolTarget(Target):
    def __init__(self, pool: ReplicaPool, model: str) -> None:
        self.pool = pool
        self.model = model

    async def call(self, client: httpx.AsyncClient, planned: PlannedRequest) -> Outcome:
        started = time.monotonic()
        placement = balance_request(planned.chat(self.model), planned.tenant)
        try:
            lease = await self.pool.acquire(placement)
        except GatewayError:
            return Outcome(refused=True)
        async with lease:
            url = f"{lease.url}/chat/completions"
            outcome = await stream_completion(client, url, planned.body(self.model), {}, started)
            if outcome.failed and outcome.failed.startswith(RESENDABLE):
                outcome = await stream_completion(
                    client, url, planned.body(self.model), {}, started
                )
            self.pool.record_result(lease, ok=outcome.failed is None)
        outcome.replica = lease.url
        return outcome


class GatewayTarget(Target):
    def __init__(
        self, url: str, model: str, api_key: str, extra: dict[str, object] | None = None
    ) -> None:
        self.url = url.rstrip("/") + "/v1/chat/completions"
        self.model = model
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # body fields beside the chat request (llama-server's `ignore_eos`)
        self.extra = extra

    async def call(self, client: httpx.AsyncClient, planned: PlannedRequest) -> Outcome:
        started = time.monotonic()
        body = planned.body(self.model, self.extra)
        outcome = await stream_completion(client, self.url, body, self.headers, started)
        if outcome.failed and outcome.failed.startswith(RESENDABLE):
            outcome = await stream_completion(client, self.url, body, self.headers, started)
        if outcome.failed and outcome.failed.startswith(("429", "503")):
            return Outcome(refused=True)
        return outcome


async def stream_completion(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, object],
    headers: dict[str, str],
    started: float,
) -> Outcome:
    outcome = Outcome()
    phase = "before the response"
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            phase = "before the first token"
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                outcome.failed = f"{response.status_code} {text[:200]}"
                return outcome
            async for line in sse_lines(response):
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                choices = chunk.get("choices") or []
                if outcome.ttft is None and any(
                    (c.get("delta") or {}).get("content") for c in choices
                ):
                    outcome.ttft = time.monotonic() - started
                    phase = "mid-stream"
                usage = chunk.get("usage")
                if usage:
                    outcome.output_tokens = usage.get("completion_tokens", 0)
                    outcome.prompt_tokens = usage.get("prompt_tokens", 0)
                    details = usage.get("prompt_tokens_details") or {}
                    outcome.cached_tokens = details.get("cached_tokens") or 0
    except httpx.HTTPError as error:
        outcome.failed = f"{type(error).__name__} {phase} {error.__cause__!r}"
        return outcome
    outcome.finished_at = time.monotonic()
    outcome.latency = outcome.finished_at - started
    return outcome


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The stream's lines, split at newlines only: `aiter_lines` also splits at U+2028
    and other Unicode line breaks, which JSON leaves unescaped inside strings (a real
    model's tokens contain them)."""
    pending = b""
    async for chunk in response.aiter_bytes():
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode()
    if pending:
        yield pending.decode()


async def replay(
    target: Target, planned: Sequence[PlannedRequest], time_scale: float
) -> tuple[list[Outcome], float]:
    """Send each request at its arrival time; returns outcomes and the wall duration."""
    limits = httpx.Limits(
        max_connections=4096, max_keepalive_connections=1024, keepalive_expiry=1.0
    )
    timeout = httpx.Timeout(600.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.monotonic()
        tasks = []
        for request in planned:
            delay = start + request.at * time_scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(target.call(client, request)))
        outcomes = await asyncio.gather(*tasks)
        for outcome in outcomes:
            if outcome.latency is not None:
                outcome.finished_at = outcome.finished_at - start
        return list(outcomes), time.monotonic() - start


# ---------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    balancer: str
    load: float
    done: int
    refused: int
    failed: int
    throughput: float
    ttft_p50: float
    ttft_p99: float
    e2e_p99: float
    hit_rate: float


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarize(
    scenario: str,
    balancer: str,
    load: float,
    outcomes: Sequence[Outcome],
    wall: float,
    time_scale: float,
) -> Row:
    done = [o for o in outcomes if o.latency is not None]
    prompt = sum(o.prompt_tokens for o in done)
    return Row(
        scenario=scenario,
        balancer=balancer,
        load=load,
        done=len(done),
        refused=sum(o.refused for o in outcomes),
        failed=sum(o.failed is not None for o in outcomes),
        throughput=sum(o.output_tokens for o in done) / (wall / time_scale),
        ttft_p50=percentile([o.ttft for o in done if o.ttft is not None], 0.5) / time_scale,
        ttft_p99=percentile([o.ttft for o in done if o.ttft is not None], 0.99) / time_scale,
        e2e_p99=percentile([o.latency for o in done if o.latency is not None], 0.99) / time_scale,
        hit_rate=sum(o.cached_tokens for o in done) / prompt if prompt else 0.0,
    )


def report_spread(outcomes: Sequence[Outcome]) -> None:
    """Requests and hit rate per replica, with --verbose."""
    for url in sorted({o.replica for o in outcomes if o.replica}):
        mine = [o for o in outcomes if o.replica == url and o.latency is not None]
        prompt = sum(o.prompt_tokens for o in mine) or 1
        hits = sum(o.cached_tokens for o in mine) / prompt
        last = max((o.finished_at for o in mine), default=0.0)
        print(
            f"    {url}: {len(mine)} requests, hit rate {hits:.1%}, last done at {last:.1f}s",
            file=sys.stderr,
        )


def report_failures(outcomes: Sequence[Outcome]) -> None:
    reasons = Counter(o.failed for o in outcomes if o.failed is not None)
    for reason, count in reasons.most_common(3):
        print(f"    {count} failed: {reason}", file=sys.stderr)


HEADER = (
    f"{'scenario':<10} {'balancer':<27} {'req/s':>6} {'done':>5} {'refused':>7} {'failed':>6} "
    f"{'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p99':>8} {'hit rate':>8}"
)


def format_row(row: Row) -> str:
    return (
        f"{row.scenario:<10} {row.balancer:<27} {row.load:>6g} {row.done:>5} {row.refused:>7} "
        f"{row.failed:>6} {row.throughput:>10.0f} {row.ttft_p50:>8.2f}s {row.ttft_p99:>8.2f}s "
        f"{row.e2e_p99:>7.2f}s {row.hit_rate:>8.1%}"
    )


def ratios(rows: Sequence[Row]) -> Iterator[str]:
    by_key = {(r.scenario, bare(r.balancer), r.load): r for r in rows}
    for row in rows:
        policy = bare(row.balancer)
        if row.scenario == "single" or not policy.startswith("prefix_affinity"):
            continue
        base = by_key.get((row.scenario, "round_robin", row.load))
        if base and base.throughput and base.hit_rate:
            via = "through the gateway, " if row.balancer != bare(row.balancer) else ""
            if row.scenario != "pool":
                via = f"{row.scenario} {via}"
            yield (
                f"{via}load {row.load:g} req/s: {policy} / round_robin throughput "
                f"{row.throughput / base.throughput:.2f}x, hit rate "
                f"{row.hit_rate / base.hit_rate:.2f}x, TTFT p99 {row.ttft_p99:.2f}s vs "
                f"{base.ttft_p99:.2f}s"
            )
    continuous = [r for r in rows if r.scenario == "single" and bare(r.balancer) == "continuous"]
    static = [r for r in rows if r.scenario == "single" and bare(r.balancer) == "static"]
    for cont, stat in zip(continuous, static, strict=False):
        if stat.throughput:
            yield (
                f"one replica at {cont.load:g} req/s: continuous / static batching throughput "
                f"{cont.throughput / stat.throughput:.2f}x"
            )


# ---------------------------------------------------------------- runs


def pool_settings(urls: list[str], balancer: str, args: argparse.Namespace) -> ReplicaPoolSettings:
    """`balancer` is a policy name, optionally with an abs threshold: `prefix_affinity:64`
    (without one, `--abs-threshold`; unset, the pool's default, scaled to its cap)."""
    name, _, abs_threshold = balancer.partition(":")
    return ReplicaPoolSettings.model_validate(
        {
            "urls": urls,
            "balancer": name,
            "balance_abs_threshold": int(abs_threshold) if abs_threshold else args.abs_threshold,
            "balance_rel_threshold": args.rel_threshold,
            "gpu_class": args.profile,
            "max_inflight_per_replica": args.max_inflight,
            "queue_size": args.queue_size,
            "queue_timeout_ms": int(args.queue_timeout * args.time_scale * 1000),
            # two emulated seconds between scrapes, as a real pool's default
            "scrape_interval_seconds": max(0.05, 2.0 * args.time_scale),
        }
    )


async def run_pool(
    urls: list[str], balancer: str, planned: Sequence[PlannedRequest], args: argparse.Namespace
) -> tuple[list[Outcome], float]:
    settings = pool_settings(urls, balancer, args)
    pool = ReplicaPool("bench", settings, balancer=build_balancer(settings))
    await pool.start()
    try:
        return await replay(PoolTarget(pool, MODEL), planned, args.time_scale)
    finally:
        await pool.stop()


def gateway_files(
    folder: Path,
    urls: list[str],
    balancer: str,
    args: argparse.Namespace,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """A server config whose one provider is a pool over `urls` (pool settings from the
    flags, then `overrides`; a None override removes the setting), and a policy with one
    model on it and one tenant key; returns the config's path."""
    replicas = pool_settings(urls, balancer, args).model_dump(mode="json", exclude_none=True)
    replicas.update(overrides or {})
    replicas = {name: value for name, value in replicas.items() if value is not None}
    # the gateway scrapes often, whatever the time scale: least_load sees fresh queues
    replicas["scrape_interval_seconds"] = min(replicas["scrape_interval_seconds"], 0.5)
    # a long emulated run is slow in wall time; the bench's client has the same budget
    patience = 600.0
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "log_format": "json"},
        "store": {"kind": "memory"},
        "providers": {
            GATEWAY_PROVIDER: {
                "kind": "openai",
                "transport": args.transport,
                "replicas": replicas,
                # one resend, as the in-process mode does for a closed keep-alive connection
                "retry": {"max_attempts": 2, "base_delay_seconds": 0.0},
                "timeouts": {"read": patience, "total": patience},
            }
        },
        "policies": ["policy.yaml"],
    }
    policy: dict[str, Any] = {
        "models": {
            MODEL: {
                "deployments": [{"provider": GATEWAY_PROVIDER, "upstream_model": MODEL}],
                "prices": {"input": 0, "output": 0},
                "max_output_tokens": 4096,
            }
        },
        "tenants": {
            "bench": {
                "keys": [
                    {
                        "id": "bench",
                        "hash": "sha256:" + hashlib.sha256(GATEWAY_KEY.encode()).hexdigest(),
                    }
                ]
            }
        },
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    return folder / "config.yaml"


@contextlib.contextmanager
def running_gateway(
    urls: list[str],
    balancer: str,
    args: argparse.Namespace,
    overrides: dict[str, Any] | None = None,
) -> Iterator[str]:
    """`gateway serve` (one worker) in front of `urls`; yields its root URL."""
    folder = Path(tempfile.mkdtemp(prefix="gw-batching-"))
    config = gateway_files(folder, urls, balancer, args, overrides)
    port = free_port()
    command = [
        sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config),
        "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    service = Service("gateway-batching", command, f"{root}/healthz").start()
    try:
        yield root
    finally:
        service.stop()
        if args.verbose:
            print(f"    gateway config: {config}, log: {service.log}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(service.log.parent, ignore_errors=True)


def run_gateway(
    urls: list[str],
    balancer: str,
    planned: Sequence[PlannedRequest],
    args: argparse.Namespace,
    overrides: dict[str, Any] | None = None,
    extra: dict[str, object] | None = None,
) -> tuple[list[Outcome], float]:
    with running_gateway(urls, balancer, args, overrides) as root:
        target = GatewayTarget(root, MODEL, GATEWAY_KEY, extra)
        return asyncio.run(replay(target, planned, args.time_scale))


def run_one(
    urls: list[str], balancer: str, planned: Sequence[PlannedRequest], args: argparse.Namespace
) -> tuple[list[Outcome], float]:
    if args.through_gateway:
        return run_gateway(urls, balancer, planned, args)
    return asyncio.run(run_pool(urls, balancer, planned, args))


def label(name: str, args: argparse.Namespace) -> str:
    return f"gateway/{name}" if args.through_gateway else name


def bare(name: str) -> str:
    return name.removeprefix("gateway/")


def run_balancers(args: argparse.Namespace, prompts: list[str]) -> Iterator[Row]:
    for load in args.loads:
        planned = workload(prompts, load, args.requests, args, args.seed, args.output_tokens)
        for balancer in args.balancers:
            with Fleet(
                args.replicas, emulator_args(args, args.kv_cache_tokens), args.base_port
            ) as fleet:
                outcomes, wall = run_one(fleet.urls, balancer, planned, args)
            row = summarize("pool", label(balancer, args), load, outcomes, wall, args.time_scale)
            report(row, outcomes, args.verbose)
            yield row


def report(row: Row, outcomes: Sequence[Outcome], verbose: bool) -> None:
    """A row as soon as it is measured, with its failures (and spread, if asked)."""
    print(format_row(row), flush=True)
    report_failures(outcomes)
    if verbose:
        report_spread(outcomes)


def run_batching_modes(args: argparse.Namespace, prompts: list[str]) -> Iterator[Row]:
    load = args.single_load
    output = args.single_output_tokens
    planned = workload(prompts, load, args.single_requests, args, args.seed + 1, output)
    for mode in ("continuous", "static"):
        emulator = emulator_args(args, args.single_kv_cache_tokens, static=mode == "static")
        # reply lengths spread over 16..output: a static batch waits for its longest
        emulator += ["--output-tokens", f"16:{output}"]
        with Fleet(1, emulator, args.base_port) as fleet:
            outcomes, wall = run_one(fleet.urls, "round_robin", planned, args)
        row = summarize("single", label(mode, args), load, outcomes, wall, args.time_scale)
        report(row, outcomes, args.verbose)
        yield row


def run_via_gateway(args: argparse.Namespace, prompts: list[str]) -> Iterator[Row]:
    target = GatewayTarget(args.via_gateway, args.model, args.api_key)
    for load in args.loads:
        planned = workload(prompts, load, args.requests, args, args.seed, args.output_tokens)
        with Fleet(args.replicas, emulator_args(args, args.kv_cache_tokens), args.base_port):
            outcomes, wall = asyncio.run(replay(target, planned, args.time_scale))
        row = summarize("gateway", "(configured)", load, outcomes, wall, args.time_scale)
        report(row, outcomes, args.verbose)
        yield row


# ---------------------------------------------------------------- real llama-server replicas

# llama-server answers with random tokens from the tiny model, which may include its EOS:
# every reply runs to max_tokens, as the emulator's do
LLAMACPP_EXTRA: dict[str, object] = {"ignore_eos": True}


@contextlib.contextmanager
def llama_fleet(args: argparse.Namespace, count: int | None = None) -> Iterator[list[str]]:
    """Fresh llama-server replicas (cold caches); yields their OpenAI base URLs."""
    layout = Layout.default()
    if finished_build(layout) is None:
        raise SystemExit(why_not_built(layout))
    model = tiny_model(layout.models, layout.vocabulary)
    options = ServerOptions(parallel=args.slots, context_per_slot=args.context_per_slot)
    with running_replicas(layout.server, model, count or args.replicas, options) as servers:
        yield [server.base_url for server in servers]


def calibrated_time_scale(args: argparse.Namespace, prompt: str) -> tuple[float, str]:
    """The emulator time scale at which its GPU profile decodes one sequence as fast as
    one llama-server replica does, and a line comparing both servers' speeds."""
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}],
        "max_tokens": 128,
        **LLAMACPP_EXTRA,
    }
    with llama_fleet(args, count=1) as (url,):
        timings = httpx.post(f"{url}/chat/completions", json=body, timeout=120).json()["timings"]
    decode, prefill, prompt_tokens = (
        timings["predicted_per_second"],
        timings["prompt_per_second"],
        timings["prompt_n"],
    )
    profile = profile_named(args.profile)
    gpu_decode_step = profile.step_seconds(0, 1, prompt_tokens)
    gpu_prefill = prompt_tokens / profile.step_seconds(prompt_tokens, 0, 0)
    scale = (1 / decode) / gpu_decode_step
    note = (
        f"llama-server, one sequence: decode {decode:,.0f} tok/s, prefill {prefill:,.0f} "
        f"tok/s ({prompt_tokens} tokens); emulated {args.profile} at time scale {scale:.3g}: "
        f"decode {1 / gpu_decode_step / scale:,.0f} tok/s, prefill {gpu_prefill / scale:,.0f} "
        "tok/s"
    )
    return scale, note


def run_llamacpp(args: argparse.Namespace, prompts: list[str], scale: float) -> Iterator[Row]:
    """Each balancer on real llama-server replicas, then on emulators matched to them and
    running at time scale `scale`."""
    # the llama pool takes its cap from /slots; the emulator's is set to the same count
    llama_pool = {"metrics_style": "llamacpp", "gpu_class": None, "max_inflight_per_replica": None}
    emulated_pool = {"metrics_style": "sglang", "max_inflight_per_replica": args.slots}
    emulator = [
        "--profile", args.profile, "--time-scale", f"{scale:.6g}", "--seed", "0",
        "--max-running-requests", str(args.slots),
        "--kv-cache-tokens", str(args.slots * args.context_per_slot),
        "--output-tokens", f"{args.output_tokens}:{args.output_tokens}",
    ]  # fmt: skip
    for load in args.loads:
        planned = workload(prompts, load, args.requests, args, args.seed, args.output_tokens)
        for balancer in args.balancers:
            with llama_fleet(args) as urls:
                outcomes, wall = run_gateway(
                    urls, balancer, planned, args, llama_pool, LLAMACPP_EXTRA
                )
            row = summarize("llamacpp", f"gateway/{balancer}", load, outcomes, wall, 1.0)
            report(row, outcomes, args.verbose)
            yield row
            with Fleet(args.replicas, emulator, args.base_port) as fleet:
                outcomes, wall = run_gateway(
                    fleet.urls, balancer, planned, args, emulated_pool, LLAMACPP_EXTRA
                )
            row = summarize("emulator", f"gateway/{balancer}", load, outcomes, wall, 1.0)
            report(row, outcomes, args.verbose)
            yield row


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--profile", default="h100", choices=("h100", "a100", "v100"))
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--kv-cache-tokens", type=int, default=64_000, help="0: the profile's")
    parser.add_argument("--max-inflight", type=int, default=None, help="default: by GPU class")
    parser.add_argument("--queue-size", type=int, default=1024)
    parser.add_argument("--queue-timeout", type=float, default=60.0, help="emulated seconds")
    parser.add_argument(
        "--abs-threshold", type=int, default=None, help="default: a quarter of the cap"
    )
    parser.add_argument("--rel-threshold", type=float, default=BoundedLoad().rel_threshold)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--system-tokens", default="1000-4000")
    parser.add_argument("--question-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=600, help="per load and balancer")
    parser.add_argument("--loads", default="20,35,inf", help="arrivals per emulated second")
    parser.add_argument(
        "--balancers",
        default=",".join(BALANCERS),
        help="policies to compare; `prefix_affinity:10` sets its abs threshold to 10",
    )
    parser.add_argument("--single-load", type=float, default=math.inf)
    parser.add_argument("--single-requests", type=int, default=200)
    parser.add_argument(
        "--single-kv-cache-tokens", type=int, default=0, help="0: the profile's (400k on h100)"
    )
    parser.add_argument("--single-output-tokens", type=int, default=512)
    parser.add_argument("--skip-single", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--verbose", action="store_true", help="per-replica spread")
    parser.add_argument("--base-port", type=int, default=0, help="0: free ports")
    parser.add_argument(
        "--through-gateway",
        action="store_true",
        help="start a `gateway serve` for each run, its pool set to the balancer under test",
    )
    parser.add_argument("--via-gateway", default=None, metavar="URL")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--api-key", default=os.environ.get("GATEWAY_API_KEY", ""))
    parser.add_argument(
        "--backend",
        choices=("emulator", "llamacpp"),
        default="emulator",
        help="llamacpp: real llama-server replicas through a gateway, beside matched emulators",
    )
    parser.add_argument(
        "--transport",
        choices=("http1", "aiohttp", "httpx"),
        default="http1",
        help="the gateway's HTTP client to the replicas (its `transport:` setting)",
    )
    parser.add_argument("--slots", type=int, default=4, help="llamacpp: slots per replica")
    parser.add_argument("--context-per-slot", type=int, default=4096, help="llamacpp: tokens")
    args = parser.parse_args(argv)
    if args.backend == "llamacpp":
        if args.via_gateway:
            parser.error("--backend llamacpp starts its own gateways: drop --via-gateway")
        # real time: the llama-server replicas run at their own speed
        args.time_scale = 1.0
        args.through_gateway = True
    args.loads = [float(x) for x in args.loads.split(",")]
    args.balancers = [b for b in args.balancers.split(",") if b]
    unknown = {b.partition(":")[0] for b in args.balancers} - set(BALANCERS)
    if unknown:
        parser.error(f"unknown balancers: {', '.join(sorted(unknown))}")
    if args.through_gateway and args.via_gateway:
        parser.error("--through-gateway starts its own gateway: drop --via-gateway")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    low, high = (int(x) for x in args.system_tokens.split("-"))
    prompts = system_prompts(args.prompts, low, high, args.seed)
    workload_line = (
        f"{args.prompts} system prompts of {args.system_tokens} tokens, {args.requests} "
        f"requests per run, {args.output_tokens} output tokens each"
    )
    scale = 1.0
    if args.backend == "llamacpp":
        scale, note = calibrated_time_scale(args, prompts[0])
        print(
            f"{args.replicas} llama-server replicas (tiny model) x {args.slots} slots of "
            f"{args.context_per_slot} tokens, beside {args.replicas} emulated {args.profile} "
            f"replicas with as many running requests and KV cells; {workload_line}; wall "
            f"seconds\n{note}\n"
        )
    else:
        print(
            f"{args.replicas} x {args.profile} replicas, time scale {args.time_scale}, KV "
            f"cache {args.kv_cache_tokens or 'profile default'} tokens each; {workload_line}\n"
        )
    print(HEADER, flush=True)
    rows: list[Row] = []
    if args.backend == "llamacpp":
        rows += run_llamacpp(args, prompts, scale)
    elif args.via_gateway:
        rows += run_via_gateway(args, prompts)
    else:
        rows += run_balancers(args, prompts)
    if not args.skip_single and args.backend == "emulator":
        rows += run_batching_modes(args, prompts)
    print()
    for line in ratios(rows):
        print(line)


if __name__ == "__main__":
    main()
