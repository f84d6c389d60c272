"""The quality loop on a simulated tenant: real `gateway serve` processes and a real
redis-server, an OpenAI-compatible fake upstream for the two served models and the judge.
Prints (a) the measured quality ratio against the true one, (b) the `measured` route's
delivered quality and strong-call share on traffic it never sampled as labels grow, beside
prompt length and random routing at the same strong share, and (c) what evaluation cost
against what the traffic cost. All numbers are simulated (see docs/evaluation.md).

    python -m bench.quality_loop [--quick] [--seed 7]

The tenant's traffic mixes shipped labelled sets of different kinds (data/routing): MMLU
(exam questions), GSM8K (maths) and MT-Bench, from the fold the shipped `ngram-v1` scorer
never saw, and all of AlpacaEval, OpenAssistant (oa_qlora) and HelloBench (long
generation; the shipped chat scorers were trained on these, but the route under test uses
no scorer). `strong` (the reference) and `weak` (the cheap model) tag each answer with
their name and the prompt's id; the judge reads the tags and answers, through the judge
prompt, with the verdict the row's labels imply (a tie where they tie), in both orders.

Two gateways share Redis. The *learning* one serves the tenant's traffic with the cheap
model (what a `measured` route with `unmeasured: prior` does before it has measured) and
evaluates a sampled share: the bench draws the sample from its seed and sends the drawn
requests with the key of a tenant evaluated at rate 1.0, so which requests are judged does
not depend on the gateway's own random draw. At each label count a *probe* gateway, its
route `measured` with `quality_target: 0.95` and `reference: strong`, starts on the same
Redis, loads the measurements and routes a held-out slice of the traffic that was never
sent to the learning gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import redis

from gateway.routing.kinds import request_kind
from gateway.training.labelled import (
    HOLDOUT_FOLD,
    SHIPPED_DATA,
    LabelledPrompt,
    fold_of,
    parse_line,
)
from tests.fakes.openai_server import OpenAIFake, Reply, completion
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import RedisServer

TARGET = 0.95
ROUTE = "tenant"
SAMPLED_KEY = "gw-bench-loop-sampled"
UNSAMPLED_KEY = "gw-bench-loop-unsampled"
PROBE_KEY = "gw-bench-loop-probe"
# USD per million tokens: a GPT-4.1-class reference, a DeepSeek-class cheap model, a
# Flash-class judge
PRICES = {"strong": (2.0, 8.0), "weak": (0.28, 0.42), "judge": (0.30, 2.50)}
# the answer's length in tokens the fakes report, by set (HelloBench asks for long text)
ANSWER_TOKENS = {"hellobench": 900, "mt_bench": 400, "alpaca_eval": 350, "oa_qlora": 350}
DEFAULT_ANSWER_TOKENS = 200
JUDGE_TOKENS = 120
BENCHMARK_SETS = ("mmlu", "gsm8k", "mt_bench")
CHAT_SETS = ("alpaca_eval", "oa_qlora", "hellobench")
MMLU_CAP = 1200
TAG = re.compile(r"Answer by (strong|weak) to prompt ([\w.:-]+)\.")


@dataclass(frozen=True)
class Prompt:
    id: str
    set: str
    text: str
    # the cheap model's judged quality against the reference: 1 better, 0.5 tie, 0 worse
    weak_verdict: float
    kind: str

    @property
    def strong_verdict(self) -> float:
        return 1.0 - self.weak_verdict


@dataclass(frozen=True)
class Mode:
    checkpoints: tuple[int, ...]
    probe: int
    sample_rate: float


QUICK = Mode(checkpoints=(25, 100), probe=200, sample_rate=0.3)
FULL = Mode(checkpoints=(25, 50, 100, 200, 400, 800), probe=600, sample_rate=0.3)


def verdict(strong: float, weak: float) -> float:
    return 1.0 if weak > strong else 0.0 if weak < strong else 0.5


def load_traffic(seed: int) -> list[Prompt]:
    """The tenant's prompts, shuffled by the seed (one row per distinct prompt text)."""
    rows: list[tuple[str, LabelledPrompt]] = []
    for name in (*BENCHMARK_SETS, *CHAT_SETS):
        path = SHIPPED_DATA / f"{name}.jsonl"
        parsed = [
            parse_line(line, f"{path}:{n}")
            for n, line in enumerate(path.read_text().splitlines(), 1)
        ]
        if name in BENCHMARK_SETS:
            parsed = [row for row in parsed if fold_of(row) == HOLDOUT_FOLD]
        if name == "mmlu":
            parsed = random.Random(seed).sample(parsed, min(MMLU_CAP, len(parsed)))
        rows.extend((name, row) for row in parsed)
    seen: set[str] = set()
    traffic = []
    for name, row in rows:
        if row.prompt in seen or not row.prompt.strip():
            continue
        seen.add(row.prompt)
        kind = request_kind(row.prompt)
        traffic.append(Prompt(row.id, name, row.prompt, verdict(row.strong, row.weak), kind))
    random.Random(seed).shuffle(traffic)
    return traffic


def tokens_of(text: str) -> int:
    return max(1, len(text) // 4)


class TaggingUpstream:
    """The fake provider's answers: `strong` and `weak` name themselves and the prompt;
    the judge finds the two tags in the judge prompt and gives the labels' verdict."""

    def __init__(self, traffic: Sequence[Prompt]) -> None:
        self.by_text = {p.text: p for p in traffic}
        self.by_id = {p.id: p for p in traffic}

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        model = str(body.get("model", ""))
        messages = body.get("messages") or []
        text_in = " ".join(str(m.get("content", "")) for m in messages)
        if model == "judge":
            return self._judge(text_in)
        last = str(messages[-1].get("content", "")) if messages else ""
        prompt = self.by_text.get(last)
        if prompt is None or model not in ("strong", "weak"):
            return Reply.error(400, f"the bench fake knows no prompt for model {model}")
        answer = f"Answer by {model} to prompt {prompt.id}."
        out = ANSWER_TOKENS.get(prompt.set, DEFAULT_ANSWER_TOKENS)
        return Reply(body=completion(model, answer, tokens_of(text_in) + 5, out))

    def _judge(self, text_in: str) -> Reply:
        tags = TAG.findall(text_in)[-2:]
        if len(tags) != 2 or tags[0][1] != tags[1][1] or tags[1][1] not in self.by_id:
            return Reply(body=completion("judge", "I cannot compare these.", 10, 5))
        (first, prompt_id), _ = tags
        weak = self.by_id[prompt_id].weak_verdict
        first_quality = weak if first == "weak" else 1.0 - weak
        mark = "A" if first_quality == 1.0 else "B" if first_quality == 0.0 else "C"
        text = f"Both answers compared on substance.\n[[{mark}]]"
        return Reply(body=completion("judge", text, tokens_of(text_in) + 5, JUDGE_TOKENS))


def gateway_config(redis_url: str, upstream_url: str) -> dict[str, Any]:
    return {
        "server": {"log_content": True},
        "store": {"kind": "redis", "redis_url": redis_url},
        "providers": {"fake": openai_provider(upstream_url)},
        "evaluation": {"queue_size": 10_000, "workers": 4},
    }


def policy(strategy: str, target: float = TARGET) -> dict[str, Any]:
    """`learn`: the cheap model serves (as before a measurement); `measured`: the route
    under test. The route's name is the same, so both read and write its labels."""

    def model(name: str) -> dict[str, Any]:
        price_in, price_out = PRICES[name]
        return {
            "deployments": [{"provider": "fake", "upstream_model": name}],
            "prices": {"input": price_in, "output": price_out},
        }

    evaluation = {"sample_rate": 1.0, "reference": "strong", "judge": "judge", "daily_usd": 1e6}
    route: dict[str, Any] = {"models": ["weak", "strong"], "evaluation": evaluation}
    if strategy == "measured":
        route |= {"strategy": "measured", "reference": "strong", "quality_target": target}
    else:
        route |= {"strategy": "cheapest"}
    tenant_keys = {"sampled": SAMPLED_KEY, "unsampled": UNSAMPLED_KEY, "probe": PROBE_KEY}
    tenants: dict[str, Any] = {
        name: {"keys": [{"id": name, "hash": key_hash(key)}]} for name, key in tenant_keys.items()
    }
    tenants["sampled"]["evaluation"] = {}
    return {
        "models": {name: model(name) for name in PRICES},
        "routes": {ROUTE: route},
        "tenants": tenants,
    }


@dataclass
class Served:
    prompt: Prompt
    model: str
    cost: Decimal
    reason: str = ""


async def send_all(
    base_url: str, key: str, prompts: Iterable[Prompt], concurrency: int = 8
) -> list[Served]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: Prompt) -> Served:
        async with gate:
            raw = await client.chat.completions.with_raw_response.create(
                model=ROUTE,
                messages=[{"role": "user", "content": prompt.text}],
                extra_headers={"x-request-id": f"loop-{prompt.id}"},
            )
            raw.parse()
            route = raw.headers.get("x-gateway-route", "")
            reason = route.split("reason=", 1)[1].split(";")[0] if "reason=" in route else ""
            cost = Decimal(raw.headers.get("x-gateway-cost-usd", "0"))
            return Served(prompt, raw.headers["x-gateway-model"], cost, reason)

    try:
        return await asyncio.gather(*(one(p) for p in prompts))
    finally:
        await client.close()


def metric_total(url: str, name: str, must_contain: str = "") -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and must_contain in line
    )


def wait_for(check: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def gateway_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gateway {' '.join(args)}: {done.stderr or done.stdout}")
    return done.stdout


# ---- the numbers ----------------------------------------------------------------------


def true_ratio(prompts: Iterable[Prompt]) -> float:
    served = reference = 0.0
    for p in prompts:
        served += p.weak_verdict
        reference += p.strong_verdict
    return served / reference if reference else math.inf


def delivered_ratio(pairs: Iterable[tuple[Prompt, bool]]) -> float:
    """Quality delivered over the reference's on the same prompts: each prompt scores the
    verdict of the model that served it (the reference scores its own verdict)."""
    delivered = reference = 0.0
    for prompt, strong in pairs:
        delivered += prompt.strong_verdict if strong else prompt.weak_verdict
        reference += prompt.strong_verdict
    # a prompt on which both tie counts 0.5 either way: the ratio is against always-strong
    return delivered / reference if reference else math.inf


def by_length(prompts: Sequence[Prompt], strong_share: float) -> float:
    ordered = sorted(prompts, key=lambda p: (-len(p.text), p.id))
    strong_count = round(strong_share * len(prompts))
    return delivered_ratio((p, i < strong_count) for i, p in enumerate(ordered))


def at_random(prompts: Sequence[Prompt], strong_share: float) -> float:
    """Expected delivered ratio of a coin sending `strong_share` to the reference."""
    strong = sum(p.strong_verdict for p in prompts)
    weak = sum(p.weak_verdict for p in prompts)
    return (strong_share * strong + (1 - strong_share) * weak) / strong


def length_share_for(prompts: Sequence[Prompt], target: float) -> float:
    """The fewest strong calls prompt length needs to deliver `target`, with its threshold
    chosen on these prompts' own labels (in sample: a bound no live router gets)."""
    for count in range(len(prompts) + 1):
        if by_length(prompts, count / len(prompts)) >= target:
            return count / len(prompts)
    return 1.0


def random_share_for(prompts: Sequence[Prompt], target: float) -> float:
    strong = sum(p.strong_verdict for p in prompts)
    weak = sum(p.weak_verdict for p in prompts)
    if weak >= target * strong:
        return 0.0
    return (target * strong - weak) / (strong - weak)


@dataclass
class Checkpoint:
    target: float
    labels: int
    strong_share: float
    delivered: float
    length: float
    random: float
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class Outcome:
    """What one run measured: the prompts by role, the gateway's measurements and labels
    (`route quality --json`, `route labels export`), the checkpoints and the spend."""

    mode: str
    seed: int
    probe: list[Prompt]
    # learning requests sent (sampled or not)
    traffic: int = 0
    sampled: list[Prompt] = field(default_factory=list)
    unsampled: list[Prompt] = field(default_factory=list)
    quality: list[dict[str, Any]] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    # the learning traffic's own spend: ledger records, and x-gateway-cost-usd summed
    client_usd: Decimal = Decimal(0)
    header_usd: Decimal = Decimal(0)
    # its evaluations' ledger records (`kind: evaluation`), and of them the reference's
    evaluation_usd: Decimal = Decimal(0)
    evaluation_records: int = 0
    reference_usd: Decimal = Decimal(0)
    dropped: float = 0.0
    seconds: float = 0.0


class Simulation:
    def __init__(self, mode: Mode, seed: int, target: float = TARGET) -> None:
        self.mode = mode
        self.seed = seed
        self.target = target
        self.traffic = load_traffic(seed)

    def run(self) -> Outcome:
        started = time.monotonic()
        probe = self.traffic[: self.mode.probe]
        learning = self.traffic[self.mode.probe :]
        draws = random.Random(f"{self.seed}:sample")
        drawn = [(p, draws.random() < self.mode.sample_rate) for p in learning]
        redis_server = RedisServer()
        redis_server.start()
        try:
            with OpenAIFake(TaggingUpstream(self.traffic)) as fake:
                config = gateway_config(redis_server.url, fake.base_url)
                with GatewayProcess(config, policy("learn")) as learner:
                    outcome = self._loop(config, learner, drawn, probe)
                    outcome.quality = json.loads(
                        gateway_cli(
                            "route", "quality", "--config", str(learner.config_path), "--json"
                        )
                    )["quality"]
                    out = learner.dir / "labels.jsonl"
                    gateway_cli(
                        "route", "labels", "export", "--config", str(learner.config_path),
                        "--out", str(out),
                    )  # fmt: skip
                    outcome.labels = [json.loads(line) for line in out.read_text().splitlines()]
                    outcome.dropped = metric_total(learner.url, "gateway_evaluation_dropped_total")
                    self._spend(outcome, redis_server.url)
        finally:
            redis_server.stop()
        outcome.seconds = time.monotonic() - started
        return outcome

    def _loop(
        self,
        config: dict[str, Any],
        learner: GatewayProcess,
        drawn: list[tuple[Prompt, bool]],
        probe: list[Prompt],
    ) -> Outcome:
        outcome = Outcome("quick" if self.mode is QUICK else "full", self.seed, probe)
        position = 0
        for labels in self.mode.checkpoints:
            batch_sampled: list[Prompt] = []
            batch_unsampled: list[Prompt] = []
            while len(outcome.sampled) + len(batch_sampled) < labels:
                if position >= len(drawn):
                    raise RuntimeError(f"the traffic ran out before {labels} labels")
                prompt, sampled = drawn[position]
                position += 1
                (batch_sampled if sampled else batch_unsampled).append(prompt)
            served = asyncio.run(send_all(learner.base_url, SAMPLED_KEY, batch_sampled))
            served += asyncio.run(send_all(learner.base_url, UNSAMPLED_KEY, batch_unsampled))
            outcome.header_usd += sum((s.cost for s in served), Decimal(0))
            outcome.sampled += batch_sampled
            outcome.unsampled += batch_unsampled
            wait_for(
                lambda: (
                    metric_total(learner.url, "gateway_evaluation_labels_total")
                    + metric_total(learner.url, "gateway_evaluation_dropped_total")
                    >= len(outcome.sampled)
                ),
                f"{labels} labels",
            )
            outcome.checkpoints.append(self._probe(config, labels, probe))
        outcome.traffic = position
        return outcome

    def _probe(self, config: dict[str, Any], labels: int, probe: list[Prompt]) -> Checkpoint:
        with GatewayProcess(config, policy("measured", self.target)) as prober:
            # the route's measurements are loaded one second after start, gauges after them
            wait_for(
                lambda: (
                    metric_total(prober.url, "gateway_evaluation_samples", f'route="{ROUTE}"') > 0
                ),
                "the probe gateway's measurements",
            )
            served = asyncio.run(send_all(prober.base_url, PROBE_KEY, probe))
        strong = [(s.prompt, s.model == "strong") for s in served]
        share = sum(1 for _, is_strong in strong if is_strong) / len(strong)
        reasons: dict[str, int] = defaultdict(int)
        for s in served:
            reasons[s.reason] += 1
        return Checkpoint(
            self.target,
            labels,
            share,
            delivered_ratio(strong),
            by_length(probe, share),
            at_random(probe, share),
            dict(reasons),
        )

    @staticmethod
    def _spend(outcome: Outcome, redis_url: str) -> None:
        """Client and evaluation spend of the learning traffic, from the ledger stream."""
        client = redis.Redis.from_url(redis_url)
        expected_clients = len(outcome.sampled) + len(outcome.unsampled)

        def records() -> list[dict[str, Any]]:
            rows: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange("gw:{ledger}:stream")  # type: ignore[assignment]
            return [json.loads(fields[b"record"]) for _, fields in rows]

        wait_for(
            lambda: sum(1 for r in records() if r.get("tenant") in ("sampled", "unsampled")
                        and not r.get("kind")) >= expected_clients,
            "the ledger's client records",
        )  # fmt: skip
        time.sleep(0.5)  # evaluation records of the last labels are batched the same way
        for record in records():
            if record.get("tenant") not in ("sampled", "unsampled"):
                continue
            cost = Decimal(record["cost_usd"])
            if record.get("kind") == "evaluation":
                outcome.evaluation_usd += cost
                outcome.evaluation_records += 1
                if record.get("model") == "strong":
                    outcome.reference_usd += cost
            else:
                outcome.client_usd += cost
        client.close()


# ---- the tables -----------------------------------------------------------------------


def interval(row: dict[str, Any]) -> tuple[float, float]:
    low = row["low"] if row["low"] is not None else 0.0
    high = row["high"] if row["high"] is not None else math.inf
    return low, high


def measured_rows(outcome: Outcome) -> list[dict[str, Any]]:
    """Table (a): per kind and overall, the cheap model's measured ratio against the true
    ratio of the sampled prompts and of all the traffic that kind had."""
    by_id = {f"loop-{p.id}": p for p in outcome.sampled}
    sampled_by_kind: dict[str, list[Prompt]] = defaultdict(list)
    for label in outcome.labels:
        prompt = by_id[label["id"]]
        sampled_by_kind[label["kind"]].append(prompt)
        sampled_by_kind["all"].append(prompt)
    traffic_by_kind: dict[str, list[Prompt]] = defaultdict(list)
    for p in [*outcome.sampled, *outcome.unsampled, *outcome.probe]:
        traffic_by_kind[p.kind].append(p)
        traffic_by_kind["all"].append(p)
    rows = []
    for quality in outcome.quality:
        if quality["route"] != ROUTE or quality["model"] != "weak":
            continue
        kind = quality["kind"]
        low, high = interval(quality)
        sampled_true = true_ratio(sampled_by_kind[kind])
        traffic_true = true_ratio(traffic_by_kind[kind])
        rows.append(
            {
                "kind": kind,
                "labels": quality["samples"],
                "ratio": quality["ratio"],
                "low": low,
                "high": high,
                "true_sampled": sampled_true,
                "true_traffic": traffic_true,
                "traffic": len(traffic_by_kind[kind]),
                "covers": low <= traffic_true <= high,
            }
        )
    rows.sort(key=lambda r: (r["kind"] == "all", -r["labels"]))
    return rows


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def print_tables(outcome: Outcome) -> None:
    target = outcome.checkpoints[0].target if outcome.checkpoints else TARGET
    sets: dict[str, int] = defaultdict(int)
    for p in [*outcome.sampled, *outcome.unsampled, *outcome.probe]:
        sets[p.set] += 1
    print(
        f"simulated tenant, seed {outcome.seed}, {outcome.mode} mode: "
        f"{outcome.traffic} learning requests ({len(outcome.sampled)} sampled and judged), "
        f"{len(outcome.probe)} held-out probe prompts; sets: "
        + ", ".join(f"{name} {n}" for name, n in sorted(sets.items()))
    )
    print("\n(a) measured quality ratio of `weak` against the reference `strong`, vs the true one")
    print_table(
        ("kind", "labels", "measured [95% interval]", "true, sampled prompts",
         "true, all traffic (n)", "covered"),
        (
            (
                row["kind"], row["labels"],
                f"{row['ratio']:.3f} [{row['low']:.3f}, {row['high']:.3f}]",
                f"{row['true_sampled']:.3f}", f"{row['true_traffic']:.3f} ({row['traffic']})",
                "yes" if row["covers"] else "NO",
            )
            for row in measured_rows(outcome)
        ),
    )  # fmt: skip
    print(
        f"\n(b) strategy `measured`, quality_target {target}, on {len(outcome.probe)} held-out "
        "prompts never sampled (delivered quality = judged quality over always-strong's)"
    )
    print_table(
        ("labels", "strong share", "delivered (measured route)", "prompt length, same share",
         "random, same share", "reasons (x-gateway-route)"),
        (
            (
                c.labels, f"{c.strong_share:.1%}", f"{c.delivered:.3f}", f"{c.length:.3f}",
                f"{c.random:.3f}",
                ", ".join(f"{r} {n}" for r, n in sorted(c.reasons.items(), key=lambda x: -x[1])),
            )
            for c in outcome.checkpoints
        ),
    )  # fmt: skip
    print(
        f"to deliver {target} on these prompts, prompt length needs "
        f"{length_share_for(outcome.probe, target):.1%} strong calls and random "
        f"{random_share_for(outcome.probe, target):.1%} (thresholds set on the probe's own "
        "labels, in sample); the true ratio of `weak` on them is "
        f"{true_ratio(outcome.probe):.3f}"
    )
    share = outcome.evaluation_usd / outcome.client_usd if outcome.client_usd else Decimal(0)
    rate = Decimal(len(outcome.sampled)) / Decimal(outcome.traffic)
    print("\n(c) evaluation spend against the traffic's spend (learning traffic, ledger records)")
    print_table(
        ("client requests", "their spend", "evaluation records", "evaluation spend", "share",
         "sampled"),
        [(
            outcome.traffic, f"${outcome.client_usd:.4f}", outcome.evaluation_records,
            f"${outcome.evaluation_usd:.4f}", f"{share:.1%}", f"{rate:.1%}",
        )],
    )  # fmt: skip
    print(
        f"one evaluation (a reference answer and two judge calls) costs {share / rate:.1f}x a "
        f"served request here; at sample_rate 5% the share would be "
        f"{share * Decimal('0.05') / rate:.1%}"
    )
    if outcome.reference_usd:
        always_reference = outcome.reference_usd / len(outcome.sampled) * outcome.traffic
        print(
            f"always-reference would have cost ${always_reference:.4f} for this traffic (the "
            "reference answers' mean cost); evaluation spend is "
            f"{outcome.evaluation_usd / always_reference:.1%} of it at this sample, "
            f"{outcome.evaluation_usd / always_reference * Decimal('0.05') / rate:.1%} at 5%"
        )
    print(
        f"\nx-gateway-cost-usd summed by the client: ${outcome.header_usd:.4f}; evaluations "
        f"dropped: {outcome.dropped:.0f}; labels exported: {len(outcome.labels)} "
        f"(distinct request ids {len({label['id'] for label in outcome.labels})}); "
        f"run took {outcome.seconds:.0f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two label counts, ~1 minute")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--target", type=float, default=TARGET, help="the measured route's quality_target"
    )
    parser.add_argument("--json", type=Path, help="also write the outcome's numbers here")
    args = parser.parse_args(argv)
    outcome = Simulation(QUICK if args.quick else FULL, args.seed, args.target).run()
    print_tables(outcome)
    if args.json is not None:
        args.json.write_text(json.dumps(summary(outcome), indent=2) + "\n")
    return 0


def summary(outcome: Outcome) -> dict[str, Any]:
    return {
        "sampled": len(outcome.sampled),
        "labels": len(outcome.labels),
        "label_ids": len({label["id"] for label in outcome.labels}),
        "dropped": outcome.dropped,
        "measured": measured_rows(outcome),
        "checkpoints": [c.__dict__ for c in outcome.checkpoints],
        "client_usd": str(outcome.client_usd),
        "header_usd": str(outcome.header_usd),
        "evaluation_usd": str(outcome.evaluation_usd),
        "evaluation_records": outcome.evaluation_records,
        "reference_usd": str(outcome.reference_usd),
        "seconds": outcome.seconds,
        "sampled_share": len(outcome.sampled) / outcome.traffic,
    }


if __name__ == "__main__":
    raise SystemExit(main())
