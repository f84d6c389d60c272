"""`gateway route quality` and `gateway route labels export`: what online evaluation
measured (docs/evaluation.md), read from the labels store.

gateway route quality --config PATH [--route NAME] [--json]
gateway route labels export --config PATH --out FILE.jsonl [--route NAME] [--metric M]

With `store.kind: redis` the labels are read from Redis; with the in-memory store they
live in the running gateway, and are asked of it (GET /admin/evaluation/labels, the admin
key as `gateway spend` takes it)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from pathlib import Path
from typing import IO, Any

import httpx
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.evaluation.labels import JUDGED, Label, decode_label
from gateway.evaluation.quality import feedback_rows, headline, quality_rows
from gateway.evaluation.redis_store import RedisLabelStore
from gateway.routing.measured import ALL_KINDS
from gateway.settings import Settings, SettingsError, load_settings

# the most labels read (the store keeps at most evaluation.max_labels)
DEFAULT_LIMIT = 100_000


class LabelsUnavailable(Exception):
    pass


def register(actions: Any) -> None:
    quality = actions.add_parser(
        "quality",
        help="measured quality per route, served model and request kind, from online evaluation",
    )
    _common(quality)
    quality.add_argument("--json", action="store_true", help="one JSON document")
    quality.set_defaults(func=run_quality)

    labels = actions.add_parser("labels", help="the labels online evaluation stored")
    what = labels.add_subparsers(dest="labels_action", metavar="{export}", required=True)
    export = what.add_parser(
        "export", help="write the labels as JSON lines `route train` reads (reference = strong)"
    )
    _common(export)
    export.add_argument("--out", type=Path, required=True, metavar="FILE.jsonl")
    export.add_argument(
        "--metric",
        default=JUDGED,
        help=f"the metric exported (default {JUDGED}: the judge's pairwise labels; a feedback"
        " metric writes its value as weak_quality and no strong_quality)",
    )
    export.set_defaults(func=run_export)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="server config YAML")
    parser.add_argument("--route", help="only this route")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="newest labels read")
    parser.add_argument("--url", help="the gateway, for the in-memory store (default: config)")
    parser.add_argument("--admin-key", help="the admin key (default: $GATEWAY_ADMIN_KEY)")


def read_labels(settings: Settings, args: argparse.Namespace) -> list[Label]:
    store = settings.config.store
    if store.kind == "redis" and store.redis_url is not None:
        try:
            return asyncio.run(
                _from_redis(store.redis_url.get_secret_value(), store.key_prefix, args.limit)
            )
        except (RedisError, OSError) as exc:
            # the URL may carry a password: name the setting, not its value
            raise LabelsUnavailable(
                f"cannot read labels from store.redis_url in {args.config} ({type(exc).__name__})"
            ) from None
    return _from_gateway(settings, args)


async def _from_redis(url: str, prefix: str, limit: int) -> list[Label]:
    client = Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
    try:
        store = RedisLabelStore(client, prefix, ttl_seconds=1, max_labels=limit)
        return await store.recent(limit)
    finally:
        await client.aclose()


def _from_gateway(settings: Settings, args: argparse.Namespace) -> list[Label]:
    server, dev = settings.config.server, settings.config.dev
    key = args.admin_key or os.environ.get("GATEWAY_ADMIN_KEY")
    key = key or (dev.print_admin_key if dev is not None else None)
    if not key:
        raise LabelsUnavailable(
            f"{args.config}: store.kind is 'memory': labels live in the running gateway; pass"
            " its admin key with --admin-key or GATEWAY_ADMIN_KEY"
        )
    url = (args.url or f"http://{server.host}:{server.port}").rstrip("/")
    try:
        response = httpx.get(
            url + "/admin/evaluation/labels",
            params={"limit": args.limit},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
    except httpx.HTTPError as exc:
        raise LabelsUnavailable(
            f"cannot reach the gateway at {url} ({type(exc).__name__})"
        ) from None
    if response.status_code != 200:
        raise LabelsUnavailable(f"{url}: {response.status_code} {response.text[:200]}")
    return [decode_label(json.dumps(item)) for item in response.json()["data"]]


def _load(args: argparse.Namespace, err: IO[str]) -> list[Label] | None:
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        print(f"{len(exc.problems)} problem(s) found:", file=err)
        for problem in exc.problems:
            print(f"  {problem}", file=err)
        return None
    try:
        labels = read_labels(settings, args)
    except LabelsUnavailable as exc:
        print(f"error: {exc}", file=err)
        return None
    if args.route is not None:
        labels = [label for label in labels if label.route == args.route]
    return labels


def run_quality(
    args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    labels = _load(args, err)
    if labels is None:
        return 1
    rows = quality_rows(labels)
    feedback = feedback_rows(labels)
    if args.json:
        document = {
            "labels": len(labels),
            "quality": [row.as_json() for row in rows],
            "feedback": [row.as_json() for row in feedback],
        }
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    if not rows and not feedback:
        out.write("unmeasured: no labels yet (is `evaluation:` on a route and a tenant?)\n")
        return 0
    routes = sorted({row.quality.route for row in rows})
    for route in routes:
        overall = next(
            (r for r in rows if r.quality.route == route and r.quality.model == ALL_KINDS), None
        )
        reference = overall.reference_model if overall is not None else ""
        out.write(f"route {route}: {headline(overall, reference)}\n")
        out.write(
            f"  {'model':<28} {'kind':<11} {'ratio':>6} {'95% interval':>16} {'n':>5}"
            f" {'eval $':>9}\n"
        )
        for row in rows:
            q = row.quality
            if q.route != route or q.model == ALL_KINDS:
                continue
            high = "inf" if not math.isfinite(q.high) else f"{q.high:.2f}"
            ratio = "n/a" if not math.isfinite(q.ratio) else f"{q.ratio:.2f}"
            out.write(
                f"  {q.model:<28} {q.kind:<11} {ratio:>6} {f'[{q.low:.2f}, {high}]':>16}"
                f" {q.samples:>5} {row.evaluation_usd:>9.4f}\n"
            )
    if feedback:
        out.write("feedback (mean, 0-1):\n")
        for f in feedback:
            out.write(
                f"  {f.route:<16} {f.model:<28} {f.metric:<16} {f.mean:.2f} (n={f.samples})\n"
            )
    return 0


def run_export(
    args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    labels = _load(args, err)
    if labels is None:
        return 1
    chosen = [label for label in reversed(labels) if label.metric == args.metric]
    written = without_content = 0
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", encoding="utf-8") as file:
            for label in chosen:
                if not label.prompt:
                    without_content += 1
                    continue
                file.write(json.dumps(export_line(label), ensure_ascii=False) + "\n")
                written += 1
    except OSError as exc:
        print(f"error: {exc.filename or args.out}: {exc.strerror}", file=err)
        return 1
    out.write(f"wrote {written} labels ({args.metric}) to {args.out}\n")
    if without_content:
        out.write(
            f"left out {without_content} labels kept without their prompt (server.log_content"
            " is off: only a hash and features were stored)\n"
        )
    if args.metric == JUDGED and written:
        out.write(f"next: gateway route train --data {args.out} --out FILE.bin\n")
    return 0


def export_line(label: Label) -> dict[str, object]:
    """One `route train` line (gateway/training/labelled.py): the reference is the
    strong model, the served model the weak one; the rest are extra keys it ignores."""
    line: dict[str, object] = {"id": label.request_id, "prompt": label.prompt}
    if label.reference_quality is not None:
        line["strong_quality"] = label.reference_quality
    line["weak_quality"] = label.served_quality
    line |= {
        "source": f"{label.tenant}/{label.route}",
        "kind": label.kind,
        "route": label.route,
        "served_model": label.served_model,
        "reference_model": label.reference_model,
        "metric": label.metric,
        "tenant": label.tenant,
    }
    if label.verdicts != ("", ""):
        line["verdicts"] = list(label.verdicts)
    # the served model was a cheaper candidate measured in the shadow of the reference
    line["shadow"] = label.shadow
    return line
