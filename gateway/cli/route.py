"""`gateway route`: review routing without sending anything.

gateway route --config PATH --explain REQUEST.json [--tenant T]   one request's plan
gateway route calibrate --config PATH --route NAME (--strong-share F | --quality F)
gateway route score --config PATH --route NAME < requests.jsonl   score many requests
gateway route label --data REQUESTS.jsonl --out LABELLED.jsonl --strong M --weak M --judge M
gateway route quality --config PATH [--json]         measured quality (online evaluation)
gateway route labels export --config PATH --out FILE.jsonl
gateway route train (--data | --from-labels) FILE... --out FILE.bin
gateway route retrain --config PATH --route NAME --from-labels FILE... [--every 6h]
gateway route rollback ROUTE --config PATH [--to VERSION | --list]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from gateway.cli import route_heads, route_label, route_quality, route_retrain, route_train
from gateway.errors import GatewayError
from gateway.routing.explain import explain
from gateway.routing.learned.scoring import ScorerSet, load_scorers
from gateway.routing.learned.weights import Scorer, versioned_route
from gateway.routing.state import TenantState
from gateway.settings import Settings, SettingsError, load_settings
from gateway.settings.routes import LearnedSettings
from gateway.training.calibration import (
    CurvePoint,
    Scored,
    curve,
    point_at,
    threshold_for_quality,
    threshold_for_share,
)
from gateway.training.labelled import (
    LabelError,
    LabelledPrompt,
    fold_of,
    read_files,
    shipped_benchmarks,
)

# the shipped labelled data (a repository checkout): calibrate's default
SCORE_BATCH = 256


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "route",
        help="explain, calibrate or score routing decisions, or train the learned scorer",
    )
    parser.add_argument("--config", help="server config YAML")
    parser.add_argument("--explain", metavar="REQUEST.json", help="a chat completion request body")
    parser.add_argument("--tenant", help="plan as this tenant (its rules, budgets, overrides)")
    parser.add_argument("--key", dest="key_id", help="plan as this key id of the tenant")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="a request header, e.g. x-gateway-route:best (repeatable)",
    )
    parser.add_argument(
        "--budget-used",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="the tenant's budget used so far, 0-1 (default 0)",
    )
    parser.add_argument(
        "--at",
        metavar="ISO-TIME",
        help="plan as of this time (default now), e.g. 2026-01-01T23:00Z",
    )
    parser.set_defaults(func=run)
    actions = parser.add_subparsers(
        dest="route_action",
        metavar="{calibrate,score,label,train,retrain,rollback,heads,quality,labels}",
    )

    calibrate = actions.add_parser(
        "calibrate", help="a learned route's trade-off curve and the threshold for a target"
    )
    calibrate.add_argument("--config", required=True, help="server config YAML")
    calibrate.add_argument("--route", required=True, help="a route with strategy `learned`")
    target = calibrate.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--strong-share", type=float, metavar="F", help="send this share (0-1) to the strong tier"
    )
    target.add_argument(
        "--quality",
        type=float,
        metavar="F",
        help="reach this fraction (0-1) of always-strong quality with the fewest strong calls",
    )
    calibrate.add_argument(
        "--data",
        type=Path,
        action="append",
        metavar="FILE.jsonl",
        help="labelled prompts (repeatable; default: the shipped data's held-out fold)",
    )
    calibrate.add_argument("--steps", type=int, default=10, help="curve points (default 10)")
    calibrate.set_defaults(func=run_calibrate)

    score = actions.add_parser(
        "score", help='score JSON lines {"id", "messages"} from stdin, one line out per request'
    )
    score.add_argument("--config", required=True, help="server config YAML")
    score.add_argument("--route", required=True, help="a route with strategy `learned`")
    score.set_defaults(func=run_score)
    route_label.register(actions)
    route_train.register(actions)
    route_retrain.register(actions)
    route_heads.register(actions)
    route_quality.register(actions)


def run(args: argparse.Namespace) -> int:
    if args.config is None or args.explain is None:
        print("error: gateway route needs --config and --explain (or calibrate / score)")
        return 2
    try:
        settings = load_settings(args.config)
        body = Path(args.explain).read_bytes()
        text = explain(
            settings.policy,
            body,
            args.tenant,
            args.key_id,
            _moment(args.at),
            headers=_headers(args.header),
            tenant_state=TenantState(budget_used_fraction=args.budget_used),
            scorers=load_scorers(settings.policy),
        )
    except SettingsError as exc:
        return _settings_problems(exc)
    except OSError as exc:
        print(f"cannot read {args.explain}: {exc.strerror}", file=sys.stderr)
        return 1
    except (GatewayError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        learned, scorers = _learned_route(settings, args.route)
        if learned.threshold is None:
            raise ValueError(
                f"route '{args.route}' uses `choice: {learned.choice}`, which has no threshold "
                "to calibrate: set its `target` (see docs/learned-routing.md)"
            )
        scorer = _scorer_of(learned, scorers)
        rows, source = _calibration_rows(args.data, scorer)
        scores = scorer.score_many([r.prompt for r in rows])
        scored = [
            Scored(r.benchmark, s, r.strong, r.weak) for r, s in zip(rows, scores, strict=True)
        ]
        if args.strong_share is not None:
            chosen = point_at(scored, threshold_for_share(scores, args.strong_share))
            target = f"strong share {args.strong_share:g}"
        else:
            if not 0 < args.quality <= 1:
                raise ValueError(f"--quality is a fraction of always-strong, got {args.quality}")
            chosen = threshold_for_quality(scored, args.quality)
            target = f"quality {args.quality:g} of always-strong"
    except SettingsError as exc:
        return _settings_problems(exc)
    except OSError as exc:
        print(f"cannot read calibration data: {exc}", file=sys.stderr)
        return 1
    except (LabelError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = sys.stdout
    out.write(f"route {args.route}: scorer {learned.scorer}, {len(rows)} prompts from {source}\n")
    out.write(f"current threshold {learned.tier_threshold:.4f}\n\n")
    _curve_table(out, curve(scored, args.steps))
    out.write(
        f"\nfor {target}: threshold {chosen.threshold:.4f} -> strong share "
        f"{chosen.strong_share:.1%}, quality {chosen.of_strong:.1%} of always-strong, "
        f"gap recovered {chosen.gap_recovered:.1%}\n"
    )
    for name in sorted({r.benchmark for r in scored}):
        mine = [r for r in scored if r.benchmark == name]
        point = point_at(mine, chosen.threshold)
        out.write(
            f"  {name}: {len(mine)} prompts, strong share {point.strong_share:.1%}, "
            f"quality {point.of_strong:.1%} of strong, gap recovered {point.gap_recovered:.1%}\n"
        )
    out.write(
        f"\nin the policy (routes.{args.route}.learned):\n"
        f"  threshold: {chosen.threshold:.4f}\n"
        f'  calibrated_for: "{target} on {len(rows)} held-out prompts ({source})"\n'
    )
    return 0


def _curve_table(out: TextIO, points: list[CurvePoint]) -> None:
    out.write("threshold  strong share  quality  of strong  gap recovered\n")
    for p in points:
        out.write(
            f"{p.threshold:9.4f}  {p.strong_share:12.1%}  {p.quality:7.4f}  "
            f"{p.of_strong:9.1%}  {p.gap_recovered:13.1%}\n"
        )


def run_score(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        learned, scorers = _learned_route(settings, args.route)
    except SettingsError as exc:
        return _settings_problems(exc)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # imported here: the planner and wire types are needed only by this subcommand
    from gateway.cli.route_score import score_batch

    failed = False
    for batch in _batches(sys.stdin, SCORE_BATCH):
        lines, any_failed = score_batch(batch, settings.policy, args.route, learned, scorers)
        failed = failed or any_failed
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
    return 1 if failed else 0


def _batches(stream: TextIO, size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in stream:
        if not line.strip():
            continue
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _learned_route(settings: Settings, route: str) -> tuple[LearnedSettings, ScorerSet]:
    """The route's learned block and its loaded scorer (and quality heads); raises
    ValueError naming what did not load."""
    found = settings.policy.routes.get(route)
    if found is None or found.learned is None:
        names = sorted(n for n, r in settings.policy.routes.items() if r.learned is not None)
        raise ValueError(
            f"route '{route}' is not a learned route (learned routes: {', '.join(names) or 'none'})"
        )
    if versioned_route(found.learned.scorer) is not None:
        raise ValueError(
            f"route '{route}' serves {found.learned.scorer}: versions promoted by `gateway route "
            "retrain`, each with the threshold calibrated into it; calibrate a weights file"
        )
    scorers: ScorerSet = load_scorers(settings.policy)
    learned = found.learned
    needed = [learned.scorer]
    if learned.choice == "cheapest_above":
        prefix = f"routes.{route}.learned.stand_ins."
        needed += [learned.quality, *(k for k in scorers.failed if k.startswith(prefix))]
    problems = [str(scorers.failed[name]) for name in needed if name in scorers.failed]
    if problems:
        raise ValueError("; ".join(problems))
    return learned, scorers


def _scorer_of(learned: LearnedSettings, scorers: ScorerSet) -> Scorer:
    scorer = scorers.get(learned.scorer)
    assert scorer is not None, "_learned_route checked that it loaded"
    return scorer


def _calibration_rows(files: list[Path] | None, scorer: Scorer) -> tuple[list[LabelledPrompt], str]:
    """Explicit files: every row. Default: the held-out prompts the scorer's header
    names: a `route train`-ed scorer's held-out file, or for the shipped one the shipped
    benchmarks' fold it was not trained on."""
    if files:
        return read_files(files), ", ".join(str(p) for p in files)
    holdout_file = scorer.header.get("holdout_file")
    if isinstance(holdout_file, str):
        path = Path(holdout_file)
        if not path.exists():
            raise ValueError(
                f"scorer {scorer.name}'s held-out prompts ({path}) are gone: pass --data"
            )
        return read_files([path]), f"{path}, held out by `gateway route train`"
    holdout = scorer.header.get("holdout_fold")
    calibration = scorer.header.get("calibration")
    if holdout is None and isinstance(calibration, dict):
        raise ValueError(
            f"scorer {scorer.name} was refit on every label (`route train --from-labels`): its"
            f" out-of-fold threshold for quality target {calibration.get('target')} is"
            f" {calibration.get('threshold')}; pass --data to calibrate on labels it never saw"
        )
    if not isinstance(holdout, int):
        raise ValueError(f"scorer {scorer.name} names no held-out fold: pass --data")
    folds = int(scorer.header.get("folds", 5))
    seed = int(scorer.header.get("fold_seed", 20))
    rows = shipped_benchmarks()
    held_out = [r for r in rows if fold_of(r, folds, seed) == holdout]
    return held_out, f"data/routing, fold {holdout} of {folds}, never trained on"


def _settings_problems(exc: SettingsError) -> int:
    print(f"{len(exc.problems)} problem(s) found:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)
    return 1


def _headers(pairs: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header expects NAME:VALUE, got {pair!r}")
        headers[name.strip().lower()] = value.strip()
    return headers


def _moment(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
