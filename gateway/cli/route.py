"""`gateway route --config PATH --explain REQUEST.json [--tenant T]`: show how a request
would be routed (candidates, costs, what was dropped and why) without sending it."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.errors import GatewayError
from gateway.routing.explain import explain
from gateway.routing.state import TenantState
from gateway.settings import SettingsError, load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "route", help="explain how a request would be routed, without sending it"
    )
    parser.add_argument("--config", required=True, help="server config YAML")
    parser.add_argument(
        "--explain", required=True, metavar="REQUEST.json", help="a chat completion request body"
    )
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


def run(args: argparse.Namespace) -> int:
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
        )
    except SettingsError as exc:
        print(f"{len(exc.problems)} problem(s) found:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cannot read {args.explain}: {exc.strerror}", file=sys.stderr)
        return 1
    except (GatewayError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


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
