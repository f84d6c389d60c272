"""Redis CPU per call of the limits scripts (admit.lua, adjust.lua), before and after.

    python bench/limit_scripts.py [--baseline main] [--requests 2000] [--rounds 3]

Starts its own redis-server and, for each version (the scripts and the Python that calls
them at the git ref `--baseline`, and this checkout), replays one request's real script
calls as the gateway makes them: `RedisLimitStore.admit` of an admission built by
`AdmissionTemplate` for one API key with a requests bucket, a tokens bucket, a
concurrency lease and a monthly budget, then `settle_many` of its settlement (tokens
refunded, the budget's reservation replaced, the lease freed), one request at a time.
Each version runs in its own process (`PYTHONPATH` at its tree), against a flushed
server; the rounds alternate the versions, and the table gives each version's median
over rounds of Redis's own `usec_per_call` for the EVALSHAs (`INFO commandstats`: the
script's whole run, its redis.call commands included) and how many commands a call ran.
The server's time is wall time on a shared machine: compare versions of one run.

`--callgrind` counts instructions instead, which a busy machine does not blur: for each
version a redis-server runs under callgrind collecting only inside EVALSHA
(`--toggle-collect=evalShaCommand`: the scripts' whole runs, their commands included),
once admitting only (the lease set emptied between chunks) and once admitting and
settling; admit's count is the first over its calls, adjust's the second less the first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# --actual-tokens, for the versions' processes
_ACTUAL_TOKENS = [516]
# requests admitted before their settlements go: the lease set stays this small (a
# listpack, as a key's set of in-flight requests is)
CHUNK = 50


def _commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """{command: (calls, usec)} from INFO commandstats."""
    info = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(stats["calls"]), int(stats["usec"]))
        for name, stats in info.items()
    }


def _delta(
    after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]], into: dict[str, Any]
) -> None:
    for name, (calls, usec) in after.items():
        was_calls, was_usec = before.get(name, (0, 0))
        if name == "info":
            continue
        if name == "evalsha":
            into["calls"] += calls - was_calls
            into["usec"] += usec - was_usec
        else:
            into["commands"] += calls - was_calls


async def _measure(
    port: int, requests: int, settle: bool = True, actual_tokens: int = 516
) -> dict[str, Any]:
    """One version's run (this process imports that version's `gateway`)."""
    import redis

    from gateway.limits import redis_keys
    from gateway.limits.redis_limit_store import RedisLimitStore
    from gateway.limits.request_limits import AdmissionTemplate, LimitOwner
    from gateway.limits.spec import settlement_for
    from gateway.settings.catalog import RateLimitSettings
    from gateway.settings.tenants import BudgetSettings

    url = f"redis://127.0.0.1:{port}/0"
    control = redis.Redis.from_url(url)
    control.flushall()
    control.script_flush()
    owner = LimitOwner(
        prefix=redis_keys.tenant_prefix("gw", "bench"),
        path=redis_keys.scope_path("key", "bench"),
        scope="key bench",
        limits=RateLimitSettings(
            requests_per_minute=100_000_000,
            tokens_per_minute=1_000_000_000_000,
            max_concurrent=100_000,
        ),
        budgets=(BudgetSettings(usd=Decimal(1_000_000_000), period="month"),),
    )
    template = AdmissionTemplate([owner])
    store = await RedisLimitStore.open(url, timeout_seconds=2.0, cluster=False)
    # each chunk's counts, per script
    totals: dict[str, list[dict[str, int]]] = {"admit": [], "adjust": []}
    made = 0

    async def chunk(size: int, count: bool) -> None:
        nonlocal made
        admitted = []
        before = _commandstats(control)
        for _ in range(size):
            made += 1
            request = template.build(
                f"req_{os.getpid():08x}{made:016x}",
                expected_tokens=433,
                worst_case_cost_usd=Decimal("0.000131"),
                now=time.time(),
            )
            admission = await store.admit(request)
            assert admission.allowed, admission
            admitted.append((request, admission))
        middle = _commandstats(control)
        if not settle:
            control.delete(*(lease.key for lease in admitted[0][0].leases))
            admitted = []
        for request, admission in admitted:
            settlement = settlement_for(
                request,
                admission,
                actual_tokens=actual_tokens,
                actual_cost_usd=Decimal("0.000147"),
                release_leases=True,
            )
            assert (await store.settle_many([settlement])) == [True]
        after = _commandstats(control)
        if count and settle:
            for name, (start, end) in (("admit", (before, middle)), ("adjust", (middle, after))):
                part = {"calls": 0, "usec": 0, "commands": 0}
                _delta(end, start, part)
                totals[name].append(part)

    try:
        await chunk(CHUNK, count=False)  # scripts loaded, keys made
        for _ in range(0, requests, CHUNK):
            await chunk(CHUNK, count=True)
    finally:
        await store.close()
        control.close()
    return {
        name: {
            "usec_per_call": [part["usec"] / part["calls"] for part in parts],
            "commands_per_call": sum(p["commands"] for p in parts)
            / max(1, sum(p["calls"] for p in parts)),
        }
        for name, parts in totals.items()
    }


def _export(ref: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "gateway"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def _run_version(root: Path, port: int, requests: int, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            "--port",
            str(port),
            "--requests",
            str(requests),
            "--actual-tokens",
            str(_ACTUAL_TOKENS[0]),
            *extra,
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="main", help="git ref of the 'before' scripts")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--actual-tokens",
        type=int,
        default=516,
        help="tokens each request really used (433 reserved): 516, as captured, charges "
        "83 more at settlement; fewer than 433 refunds, as most requests do",
    )
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--admit-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _ACTUAL_TOKENS[0] = args.actual_tokens
    if args.measure:
        measured = _measure(args.port, args.requests, not args.admit_only, args.actual_tokens)
        print(json.dumps(asyncio.run(measured)))
        return

    sys.path.insert(0, str(REPO))
    from bench.processes import free_port, start_redis

    with tempfile.TemporaryDirectory(prefix="bench-limit-scripts-") as folder:
        before_root = Path(folder) / "before"
        before_root.mkdir()
        _export(args.baseline, before_root)
        versions = {f"before ({args.baseline})": before_root, "after (this tree)": REPO}
        if args.callgrind:
            _callgrind_table(versions, args.requests, Path(folder))
            return
        port = free_port()
        service = start_redis(port, None)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
        try:
            for round_ in range(args.rounds):
                order = list(versions.items())
                if round_ % 2:
                    order.reverse()
                for name, root in order:
                    results[name].append(_run_version(root, port, args.requests))
        finally:
            service.stop()
    names = list(versions)
    print(
        f"redis-server usec_per_call (INFO commandstats) of {args.rounds} rounds of "
        f"{args.requests} requests, one request a call, counted in chunks of {CHUNK}: "
        "the chunks' median (and their 10th percentile, less blurred by a busy machine)"
    )
    print(f"{'script':8} {names[0]:>24} {names[1]:>24} {'change':>8}   commands/call")
    for script in ("admit", "adjust"):
        cells, medians = [], []
        for name in names:
            chunks = sorted(u for r in results[name] for u in r[script]["usec_per_call"])
            median, low = statistics.median(chunks), chunks[len(chunks) // 10]
            medians.append(median)
            cells.append(f"{median:.2f} ({low:.2f})")
        commands = [results[n][0][script]["commands_per_call"] for n in names]
        change = (medians[1] - medians[0]) / medians[0] * 100
        print(
            f"{script:8} {cells[0]:>24} {cells[1]:>24} {change:>+7.1f}%"
            f"   {commands[0]:.1f} -> {commands[1]:.1f}"
        )


def _callgrind_table(versions: dict[str, Path], requests: int, folder: Path) -> None:
    from bench.processes import free_port, wait_for_redis
    from tests.support.redis_server import redis_server_binary

    counts: dict[str, dict[str, float]] = {}
    for name, root in versions.items():
        totals = {}
        for phase in ("admit", "both"):
            port = free_port()
            out = folder / f"redis-{len(counts)}-{phase}.cg"
            command = [
                "valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
                f"--callgrind-out-file={out}", redis_server_binary(), "--port", str(port),
                "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder),
            ]  # fmt: skip
            server = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_for_redis(port, timeout=60)
                extra = ("--admit-only",) if phase == "admit" else ()
                _run_version(root, port, requests, *extra)
                subprocess.run(
                    ["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True
                )
                server.wait(timeout=60)
            finally:
                if server.poll() is None:
                    server.kill()
            text = out.read_text()
            match = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
            assert match, f"no total in {out}"
            # (the counted chunks and the warm-up one)
            totals[phase] = int(match.group(1)) / (requests + CHUNK)
        counts[name] = {"admit": totals["admit"], "adjust": totals["both"] - totals["admit"]}
    names = list(versions)
    print(
        "redis-server instructions a call inside EVALSHA (callgrind), "
        f"{requests} requests, one request a call"
    )
    print(f"{'script':8} {names[0]:>22} {names[1]:>22} {'change':>8}")
    for script in ("admit", "adjust"):
        before, after = counts[names[0]][script], counts[names[1]][script]
        change = (after - before) / before * 100
        print(f"{script:8} {before:>22,.0f} {after:>22,.0f} {change:>+7.1f}%")


if __name__ == "__main__":
    main()
