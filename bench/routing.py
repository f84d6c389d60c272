"""What routing saves: replay a mixed workload through the planner, offline.

    .venv/bin/python bench/routing.py [--workload bench/workloads/mixed.jsonl]
                                      [--policy policies/models.yaml --policy ...]
                                      [--at 2026-01-01T12:00:00+00:00]

Every request of the workload is planned on every route of the policy and on two
baselines (always GPT-4.1, always Claude Sonnet 4.5). The first candidate serves it and
is billed, through the catalog's price formula, for the prompt tokens and the answer length
the workload gives (`output_tokens`). Nothing is sent anywhere. The bench prints the cost
per 1,000 requests of each route against the baselines, and each route's share of
requests per model. A request a route cannot serve (no model fits) counts as refused and
costs nothing, so a route's cost is over the requests it served.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import msgspec

from gateway.errors import GatewayError
from gateway.routing.features import RequestFeatures, extract_features, stable_hash
from gateway.routing.learned.scoring import ScorerSet, attach_score_now, load_scorers
from gateway.routing.policy_engine import plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.loader import load_policy
from gateway.settings.policy import Policy
from gateway.usage import Usage
from gateway.wire.openai import ChatRequest, Message, request_decoder

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOAD = ROOT / "bench" / "workloads" / "mixed.jsonl"
DEFAULT_POLICIES = [ROOT / "policies" / "models.yaml", ROOT / "policies" / "routes.yaml"]
BASELINES = {"always gpt-4.1": "gpt-4.1", "always claude-sonnet-4.5": "claude-sonnet-4.5"}
PAD_TEXT = "the report shows revenue growth while costs stayed flat "


@dataclass(frozen=True)
class Replayed:
    kind: str
    features: RequestFeatures
    output_tokens: int
    request: ChatRequest


@dataclass
class Tally:
    served: int = 0
    refused: int = 0
    cost: Decimal = Decimal(0)
    per_model: Counter[str] = field(default_factory=Counter)

    def per_thousand(self) -> Decimal:
        return self.cost / self.served * 1000 if self.served else Decimal(0)


def load_workload(path: Path) -> list[Replayed]:
    replayed = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        item = json.loads(line)
        request = request_decoder.decode(json.dumps(item["request"]).encode())
        request = _padded(request, item.get("pad_tokens", 0))
        features = extract_features(
            request, {}, tenant=None, key_id=None, seed=stable_hash(f"request-{number}")
        )
        replayed.append(Replayed(item["class"], features, int(item["output_tokens"]), request))
    return replayed


def _padded(request: ChatRequest, pad_tokens: int) -> ChatRequest:
    if not pad_tokens:
        return request
    words = PAD_TEXT.split()
    document = " ".join(words[i % len(words)] for i in range(pad_tokens))
    last = request.messages[-1]
    padded = Message(role=last.role, content=f"{last.text()}\n\n{document}")
    return msgspec.structs.replace(request, messages=[*request.messages[:-1], padded])


def replay(
    workload: list[Replayed], policy: Policy, name: str, now: datetime, scorers: ScorerSet
) -> Tally:
    tally = Tally()
    for item in workload:
        features = msgspec.structs.replace(item.features, requested=name)
        try:
            # learned routes are scored as the gateway scores them (others skip it)
            features = attach_score_now(features, item.request, policy, TenantState(), now, scorers)
            result = plan(features, policy, TenantState(), LiveStats(), now)
        except GatewayError:
            tally.refused += 1
            continue
        first = result.candidates[0]
        model = policy.models[first.model]
        deployment = next(
            d
            for d in model.deployments
            if (d.id or f"{d.provider}/{d.upstream_model}") == first.deployment.id
        )
        usage = Usage(input_tokens=features.prompt_tokens, output_tokens=item.output_tokens)
        tally.cost += model.prices_on(deployment).cost_of(usage)
        tally.served += 1
        tally.per_model[first.model] += 1
    return tally


def render(tallies: dict[str, Tally], models: list[str], total: int) -> str:
    gpt = tallies["always gpt-4.1"].per_thousand()
    sonnet = tallies["always claude-sonnet-4.5"].per_thousand()
    head = ["route", "$/1k req", "vs gpt-4.1", "vs sonnet-4.5", "refused"]
    rows = [head]
    for name, tally in tallies.items():
        cost = tally.per_thousand()
        rows.append(
            [name, f"{cost:.2f}", _delta(cost, gpt), _delta(cost, sonnet), str(tally.refused)]
        )
    shares = [["route", *models]]
    for name, tally in tallies.items():
        shares.append(
            [name, *(_share(tally.per_model[m], total) for m in models)],
        )
    return "\n".join([*_table(rows), "", "share of requests per model:", *_table(shares)])


def _delta(cost: Decimal, baseline: Decimal) -> str:
    if not baseline:
        return "-"
    return f"{(cost - baseline) / baseline * 100:+.0f}%"


def _share(count: int, total: int) -> str:
    return f"{count / total * 100:.0f}%" if count else "-"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if c == 0 else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--policy", type=Path, action="append", dest="policies")
    parser.add_argument("--at", default="2026-01-01T12:00:00+00:00", help="plan as of (UTC)")
    args = parser.parse_args(argv)
    problems: list[str] = []
    policies = tuple(args.policies or DEFAULT_POLICIES)
    policy = load_policy(policies, os.environ, problems)
    if policy is None:
        print("\n".join(problems), file=sys.stderr)
        return 1
    now = datetime.fromisoformat(args.at).astimezone(UTC)
    started = time.perf_counter()
    workload = load_workload(args.workload)
    names = {route: route for route in policy.routes} | BASELINES
    scorers = load_scorers(policy)
    tallies = {label: replay(workload, policy, name, now, scorers) for label, name in names.items()}
    elapsed = time.perf_counter() - started
    classes = Counter(item.kind for item in workload)
    mix = ", ".join(f"{kind} {count}" for kind, count in sorted(classes.items()))
    print(f"workload: {args.workload.name}, {len(workload)} requests ({mix})")
    print(f"planned at {now.isoformat()}; {len(names)} routes in {elapsed:.2f}s\n")
    print(render(tallies, list(policy.models), len(workload)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
