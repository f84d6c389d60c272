"""`gateway spend`: print what the shared ledger recorded, as a table or CSV."""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import httpx
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.metering.aggregates import LedgerKeys, Totals
from gateway.metering.cost import format_usd
from gateway.metering.spend import (
    GROUP_BYS,
    SpendQuery,
    SpendReport,
    SpendRow,
    parse_time,
    query_redis,
    report_from_json,
)
from gateway.settings import Settings, SettingsError, load_settings

COLUMNS = (
    "requests",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "estimated",
    "cost_usd",
)
HEADINGS = (
    "requests",
    "input",
    "cached",
    "cache write",
    "output",
    "reasoning",
    "estimated",
    "cost (USD)",
)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `spend` to the `gateway` command's subparsers; `args.func(args)` runs it."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "spend",
        help="print recorded spend from the shared ledger",
        description="Spend recorded in the ledger (Redis), filtered and grouped. "
        "Times are UTC; a range of whole days is read from the daily counters, "
        "anything else from the ledger's records.",
    )
    parser.add_argument("--config", required=True, help="the server config file")
    parser.add_argument("--tenant", help="only this tenant")
    parser.add_argument("--key", help="only this key id")
    parser.add_argument("--model", help="only this model")
    parser.add_argument(
        "--since",
        help="start: a duration back from now (7d, 12h) or a date (2026-11-01); "
        "default: everything the ledger keeps",
    )
    parser.add_argument("--until", help="end (exclusive), same forms as --since; default: now")
    parser.add_argument("--group-by", choices=GROUP_BYS, help="one row per value")
    parser.add_argument("--csv", action="store_true", help="CSV on stdout, exact costs")
    parser.add_argument(
        "--url",
        help="with the in-memory store: the running gateway to ask (GET /admin/spend); "
        "default: server.host and server.port of the config",
    )
    parser.add_argument(
        "--admin-key",
        help="with the in-memory store: the admin key (default: $GATEWAY_ADMIN_KEY, or the "
        "dev config's printed admin key)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        print(f"{len(exc.problems)} problem(s) found:", file=err)
        for problem in exc.problems:
            print(f"  {problem}", file=err)
        return 1
    store = settings.config.store
    try:
        query = _query(args, datetime.now(UTC))
    except ValueError as exc:
        print(f"gateway spend: {exc}", file=err)
        return 2
    if store.kind != "redis" or store.redis_url is None:
        # no shared ledger: the running gateway keeps spend in its memory; ask it
        return _from_gateway(args, settings, query, out, err)
    try:
        report = asyncio.run(
            _read(store.redis_url.get_secret_value(), query, LedgerKeys(store.key_prefix))
        )
    except (RedisError, OSError) as exc:
        # the URL may carry a password: name the setting, not its value
        print(
            f"gateway spend: cannot read the ledger from store.redis_url in {args.config} "
            f"({type(exc).__name__})",
            file=err,
        )
        return 1
    if report.stream_starts is not None:
        print(stream_note(report.stream_starts), file=err)
    if args.csv:
        write_csv(report, out)
    else:
        write_table(report, out)
    return 0


def stream_note(starts: datetime) -> str:
    """Why a report from the ledger's records counts less than its range asked for."""
    return (
        f"note: the ledger's records start at {starts.isoformat(timespec='seconds')}: "
        "older ones were let go (store.ledger_stream_retention_seconds, "
        "store.ledger_stream_max_records) and are not in this report; a range of whole UTC "
        "days (--since 2026-11-01 --until 2026-12-01) is read from the daily counters, "
        "which keep every record"
    )


def _from_gateway(
    args: argparse.Namespace, settings: Settings, query: SpendQuery, out: TextIO, err: TextIO
) -> int:
    server = settings.config.server
    dev = settings.config.dev
    key = args.admin_key or os.environ.get("GATEWAY_ADMIN_KEY")
    key = key or (dev.print_admin_key if dev is not None else None)
    if not key:
        print(
            f"{args.config}: store.kind is '{settings.config.store.kind}': there is no shared "
            "ledger; spend lives in the running gateway's memory: to read it from there, pass "
            "its admin key with --admin-key or "
            "GATEWAY_ADMIN_KEY (or configure store.kind: redis for a shared ledger)",
            file=err,
        )
        return 1
    url = (args.url or f"http://{server.host}:{server.port}").rstrip("/")
    params = {
        name: value
        for name, value in (
            ("tenant", query.tenant),
            ("key", query.key),
            ("model", query.model),
            ("from", query.since.isoformat() if query.since else None),
            ("to", query.until.isoformat() if query.until else None),
            ("group_by", query.group_by),
        )
        if value is not None
    }
    try:
        response = httpx.get(
            url + "/admin/spend",
            params=params,
            headers={"authorization": f"Bearer {key}"},
            timeout=10,
        )
    except httpx.HTTPError as exc:
        print(
            f"gateway spend: no gateway answered at {url} ({type(exc).__name__}); the "
            "in-memory store keeps spend in the running gateway: start it (make dev) or "
            "pass --url",
            file=err,
        )
        return 1
    if response.status_code != 200:
        print(f"gateway spend: {url}/admin/spend: {_error_text(response)}", file=err)
        return 1
    report = report_from_json(response.json(), query)
    if args.csv:
        write_csv(report, out)
    else:
        write_table(report, out)
    return 0


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    message = error.get("message") if isinstance(error, dict) else None
    return f"{response.status_code} {message or response.reason_phrase}"


def write_table(report: SpendReport, out: TextIO) -> None:
    label = report.query.group_by or ""
    rows = [[row.group, *_cells(row.totals, places=6)] for row in _group_rows(report)]
    rows.append(["total", *_cells(report.total, places=6)])
    table = [[label, *HEADINGS], *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for number, line in enumerate(table):
        cells = [line[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        print("  ".join(cells).rstrip(), file=out)
        if number == 0 or (number == len(table) - 2 and len(table) > 2):
            print("  ".join("-" * w for w in widths), file=out)


def write_csv(report: SpendReport, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([report.query.group_by or "group", *COLUMNS])
    for row in _group_rows(report):
        writer.writerow([row.group, *_cells(row.totals, places=None)])
    writer.writerow(["total", *_cells(report.total, places=None)])


def _group_rows(report: SpendReport) -> list[SpendRow]:
    """Ungrouped, the one row is the total: print it once, as the total row."""
    return report.rows if report.query.group_by is not None else []


def _cells(totals: Totals, places: int | None) -> list[str]:
    cells = [str(getattr(totals, column)) for column in COLUMNS[:-1]]
    cost = totals.cost_usd
    cells.append(str(cost) if places is None else format_usd(cost, places))
    return cells


def _query(args: argparse.Namespace, now: datetime) -> SpendQuery:
    return SpendQuery(
        tenant=args.tenant,
        key=args.key,
        model=args.model,
        since=parse_time(args.since, now) if args.since else None,
        until=parse_time(args.until, now) if args.until else None,
        group_by=args.group_by,
    )


async def _read(url: str, query: SpendQuery, keys: LedgerKeys) -> SpendReport:
    redis = Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
    try:
        return await query_redis(redis, query, keys)
    finally:
        await redis.aclose()
