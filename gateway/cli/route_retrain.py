"""`gateway route retrain` and `gateway route rollback`: versioned scorer weights in Redis.

Retraining runs in its own process (a cron job, a Kubernetes CronJob, or this command
with `--every 6h` under a supervisor), never on a serving replica's event loop: it fits
a candidate on the labels (`route train --from-labels`, stratified out of fold, refit on
every label), scores the version the route serves now on the same labels, and promotes
the candidate only when the lower bound of its out-of-fold APGR interval beats both the
current scorer's APGR and prompt length's (routing/learned/promotion.py). A promoted
version becomes current in Redis in one step; replicas serving the route with
`learned.scorer: redis:ROUTE` adopt it within seconds (pipeline/scorer_watch.py), with
the threshold calibrated into its header. Each promotion and rollback is an entry in the
admin audit trail (GET /admin/audit, the console).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.admin import RedisAdminStore
from gateway.admin.change import Change
from gateway.cli.fitting_input import InputError, numpy_missing
from gateway.cli.route_train import check_rows, shipped_rows
from gateway.cli.route_train_labels import (
    LENGTH_ROUTER,
    TRAINED_ROUTER,
    read_labels,
    train_from_labels,
)
from gateway.routing.learned.promotion import RouterEvidence, Verdict, promotion_verdict
from gateway.routing.learned.weights import WeightsError, decode, versioned_route
from gateway.settings import Settings, SettingsError, load_settings
from gateway.state.scorer_versions import ScorerVersions, VersionError
from gateway.training.labelled import LabelError, LabelledPrompt

_EVERY = re.compile(r"^(\d+)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
ACTOR = "gateway route retrain"


def register(actions: Any) -> None:
    retrain = actions.add_parser(
        "retrain",
        help="fit a candidate scorer on labels and promote it in Redis if its evidence wins",
        description=__doc__.split("\n\n")[0],
    )
    retrain.add_argument("--config", required=True, help="server config YAML (its Redis store)")
    retrain.add_argument("--route", required=True, help="a route with learned.scorer: redis:ROUTE")
    retrain.add_argument(
        "--from-labels", type=Path, nargs="+", required=True, metavar="FILE.jsonl",
        help="labels as `gateway route labels export` writes them (re-read every run)",
    )  # fmt: skip
    retrain.add_argument(
        "--every", metavar="DURATION", help="run again every DURATION (90s, 30m, 6h, 1d)"
    )
    retrain.add_argument(
        "--with-shipped", action="store_true",
        help="train on the shipped MMLU/GSM8K/MT-Bench labels too (a checkout's)",
    )  # fmt: skip
    retrain.set_defaults(func=run_retrain)

    rollback = actions.add_parser(
        "rollback", help="serve the previously promoted (or a given) scorer version again"
    )
    rollback.add_argument("route", metavar="ROUTE")
    rollback.add_argument("--config", required=True, help="server config YAML (its Redis store)")
    rollback.add_argument("--to", type=int, metavar="VERSION", help="default: the one before")
    rollback.add_argument(
        "--list", action="store_true", help="list the stored versions and change nothing"
    )
    rollback.set_defaults(func=run_rollback)


def every_seconds(text: str) -> int:
    found = _EVERY.match(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise InputError(f"--every {text!r}: expected a duration such as 90s, 30m, 6h or 1d")
    return int(found.group(1)) * _SECONDS[found.group(2)]


def run_retrain(args: argparse.Namespace) -> int:
    if numpy_missing("gateway route retrain"):
        return 1
    try:
        interval = every_seconds(args.every) if args.every else None
        settings = load_settings(args.config)
        target = _versioned_route(settings, args.route)
        redis_url = _redis_url(settings)
    except SettingsError as exc:
        print("error: " + "; ".join(exc.problems), file=sys.stderr)
        return 1
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    while True:
        code = asyncio.run(_retrain_once(args, settings, target, redis_url))
        if interval is None:
            return code
        print(f"next run in {args.every}", flush=True)
        time.sleep(interval)


def _versioned_route(settings: Settings, route: str) -> float:
    """The route's quality target (0.95 when it sets none); refuses a route that does
    not serve `redis:ROUTE` versions."""
    found = settings.policy.routes.get(route)
    if found is None:
        raise InputError(f"--route {route}: no such route in {settings.config_path}")
    scorer = found.learned.scorer if found.learned is not None else None
    if scorer is None or versioned_route(scorer) != route:
        raise InputError(
            f"--route {route}: its learned.scorer is {scorer!r}; name `scorer: redis:{route}` "
            "so its replicas serve the promoted versions"
        )
    return found.quality_target or 0.95


def _redis_url(settings: Settings) -> str:
    store = settings.config.store
    if store.kind != "redis" or store.redis_url is None:
        raise InputError(
            f"{settings.config_path}: store.kind must be redis: versions live where every "
            "replica reads them"
        )
    return store.redis_url.get_secret_value()


def _client(url: str) -> Any:
    from redis.asyncio import Redis

    return Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)


async def _retrain_once(
    args: argparse.Namespace, settings: Settings, target: float, url: str
) -> int:
    route: str = args.route
    try:
        own, lines = read_labels(args.from_labels)
        check_rows(own, hash_fold=False)
        shipped = shipped_rows() if args.with_shipped else []
        trained = train_from_labels(
            route, own, lines, shipped, args.from_labels, "all", target, Path(".unused")
        )
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    except (LabelError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = {row.router: row.evidence for row in trained.evidence}
    candidate, length = _of(rows[TRAINED_ROUTER]), _of(rows[LENGTH_ROUTER])
    client = _client(url)
    try:
        store = ScorerVersions(client, route, settings.config.store.key_prefix)
        serving = await store.current()
        current = await _current_evidence(store, serving, own)
        verdict = promotion_verdict(candidate, current, length)
        print(_summary(route, len(own), candidate, current, serving, length, verdict))
        if not verdict.promote:
            return 0
        meta = {
            "at": _now(),
            "labels": len(own),
            "files": [str(p) for p in args.from_labels],
            "evidence": {"candidate": candidate.__dict__, "length": length.__dict__,
                         "current": None if current is None else current.__dict__},
            "calibration": trained.calibration.__dict__,
            "verdict": verdict.reason,
        }  # fmt: skip
        version = await store.publish(trained.weights, meta)
        previous = await store.promote(version)
        await _audit(client, settings, "scorer.promote", route, version, previous, verdict.reason)
        print(f"route {route}: version {version} is now current (was {previous or 'none'})")
        return 0
    finally:
        await client.aclose()


def _of(evidence: Any) -> RouterEvidence:
    return RouterEvidence(float(evidence.apgr), float(evidence.low), float(evidence.high))


async def _current_evidence(
    store: ScorerVersions, version: int | None, own: list[LabelledPrompt]
) -> RouterEvidence | None:
    """The served version's APGR on these labels (in sample where it saw some)."""
    if version is None:
        return None
    data = await store.weights(version)
    if data is None:
        return None
    import numpy as np

    from gateway.training import fitting

    try:
        scorer = decode(data, f"redis:{store.route}@v{version}")
    except WeightsError:
        return None
    scores = np.asarray(scorer.score_many([r.prompt for r in own]))
    strong = np.asarray([r.strong for r in own])
    weak = np.asarray([r.weak for r in own])
    return _of(fitting.evidence(scores, strong, weak))


def _summary(
    route: str,
    labels: int,
    candidate: RouterEvidence,
    current: RouterEvidence | None,
    serving: int | None,
    length: RouterEvidence,
    verdict: Verdict,
) -> str:
    def cell(e: RouterEvidence) -> str:
        return f"{e.apgr:.3f} [{e.low:.3f}, {e.high:.3f}]"

    served = "none" if current is None else f"v{serving} {cell(current)}"
    return (
        f"route {route}, {labels} labels: candidate (out of fold) {cell(candidate)}; "
        f"current {served}; prompt length {cell(length)}\n{verdict.reason}"
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


async def _audit(
    client: Any,
    settings: Settings,
    action: str,
    route: str,
    version: int,
    previous: int | None,
    why: str,
) -> None:
    detail = {"version": version, "previous": previous, "why": why}
    entry = {
        "at": _now(),
        "actor": ACTOR if action == "scorer.promote" else "gateway route rollback",
        "address": socket.gethostname(),
        "action": action,
        "target": route,
        "tenant": "",
        "detail": json.dumps(detail, separators=(",", ":"), sort_keys=True),
    }
    admin = RedisAdminStore(client, settings.config.store.key_prefix)
    await admin.apply(Change(action=action, target=route, audit=entry))


def run_rollback(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        _versioned_route(settings, args.route)
        url = _redis_url(settings)
    except SettingsError as exc:
        print("error: " + "; ".join(exc.problems), file=sys.stderr)
        return 1
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_rollback(args, settings, url))


async def _rollback(args: argparse.Namespace, settings: Settings, url: str) -> int:
    client = _client(url)
    try:
        store = ScorerVersions(client, args.route, settings.config.store.key_prefix)
        if args.list:
            current = await store.current()
            for stored in await store.history():
                mark = "*" if stored.version == current else " "
                print(f"{mark} v{stored.version}  {stored.meta.get('at', '')}  "
                      f"{stored.meta.get('verdict', '')}")  # fmt: skip
            return 0
        version = args.to if args.to is not None else await store.rollback_target()
        previous = await store.promote(version)
        why = f"rolled back by hand to v{version}"
        await _audit(client, settings, "scorer.rollback", args.route, version, previous, why)
        print(f"route {args.route}: version {version} is now current (was {previous or 'none'})")
        return 0
    except VersionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        await client.aclose()
