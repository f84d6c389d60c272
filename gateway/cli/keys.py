"""`gateway keys ...`: offline helpers (`hash`, `new`) and the runtime tenants and keys of a
running gateway, through its admin API (`tenants`, `tenant-create`, `tenant-set`,
`tenant-delete`, `list`, `create`, `set`, `rotate`, `revoke`, `audit`)."""

from __future__ import annotations

import argparse
import getpass
import json
import secrets
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from gateway.cli.admin_http import AdminCallFailed, AdminClient, add_connection_arguments

Verb = Callable[[AdminClient, argparse.Namespace], Any]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("keys", help="client keys, tenants and the admin audit trail")
    actions = parser.add_subparsers(dest="action", required=True)
    hashing = actions.add_parser("hash", help="print the sha256 form of a key")
    hashing.add_argument("key", nargs="?", help="the key (read from stdin or a prompt if absent)")
    hashing.set_defaults(func=run_hash)
    new = actions.add_parser("new", help="generate a random key and print it with its hash")
    new.add_argument("--prefix", default="gw-")
    new.set_defaults(func=run_new)

    def verb(name: str, help_text: str, run: Verb) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        add_connection_arguments(sub)
        sub.set_defaults(func=lambda args: call(run, args))
        return sub

    verb("tenants", "list YAML and runtime tenants", _tenants)
    created = verb("tenant-create", "create a runtime tenant", _tenant_create)
    created.add_argument("id")
    _limit_arguments(created)
    created.add_argument("--allow-overrides", action="store_true")
    changed = verb("tenant-set", "change a runtime tenant's limits or budget", _tenant_set)
    changed.add_argument("id")
    _limit_arguments(changed)
    deleted = verb("tenant-delete", "delete a runtime tenant without live keys", _tenant_delete)
    deleted.add_argument("id")
    listed = verb("list", "list keys (never a key or its hash)", _list)
    listed.add_argument("--tenant")
    issued = verb("create", "issue a key for a runtime tenant (the key is printed once)", _create)
    issued.add_argument("--tenant", required=True)
    issued.add_argument("--id", required=True, help="the key's id (in the ledger, metrics, logs)")
    _key_arguments(issued)
    updated = verb("set", "change a runtime key's models, limits or budget", _set)
    updated.add_argument("id")
    _key_arguments(updated)
    rotated = verb("rotate", "a new key for the same id; the old one works --grace more", _rotate)
    rotated.add_argument("id")
    rotated.add_argument("--grace", type=int, default=3600, help="seconds (default 3600)")
    revoked = verb("revoke", "revoke a runtime key on every replica", _revoke)
    revoked.add_argument("id")
    audit = verb("audit", "who changed what, when (newest first)", _audit)
    audit.add_argument("--limit", type=int, default=50)


def _limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rpm", type=int, help="requests per minute")
    parser.add_argument("--tpm", type=int, help="tokens per minute")
    parser.add_argument("--max-concurrent", type=int)
    parser.add_argument("--budget-usd", help="a spend budget in US dollars")
    parser.add_argument("--budget-period", choices=("day", "month"), default="month")


def _key_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", help="comma-separated models and routes the key may use")
    _limit_arguments(parser)


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The body fields the limit flags ask for (only those given: `set` changes no others)."""
    body: dict[str, Any] = {}
    limits = {
        name: value
        for name, value in (
            ("requests_per_minute", args.rpm),
            ("tokens_per_minute", args.tpm),
            ("max_concurrent", args.max_concurrent),
        )
        if value is not None
    }
    if limits:
        body["limits"] = limits
    if args.budget_usd is not None:
        body["budgets"] = [{"usd": args.budget_usd, "period": args.budget_period}]
    return body


def _key_body(args: argparse.Namespace) -> dict[str, Any]:
    body = _limits(args)
    if args.models is not None:
        body["models"] = [m.strip() for m in args.models.split(",") if m.strip()]
    return body


def _tenants(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("GET", "/admin/tenants")


def _tenant_create(client: AdminClient, args: argparse.Namespace) -> Any:
    body = {"id": args.id, **_limits(args)}
    if args.allow_overrides:
        body["allow_overrides"] = True
    return client.call("POST", "/admin/tenants", body)


def _tenant_set(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("PATCH", f"/admin/tenants/{args.id}", _limits(args))


def _tenant_delete(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("DELETE", f"/admin/tenants/{args.id}")


def _list(client: AdminClient, args: argparse.Namespace) -> Any:
    suffix = f"?tenant={args.tenant}" if args.tenant else ""
    return client.call("GET", "/admin/keys" + suffix)


def _create(client: AdminClient, args: argparse.Namespace) -> Any:
    body = {"tenant": args.tenant, "id": args.id, **_key_body(args)}
    return client.call("POST", "/admin/keys", body)


def _set(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("PATCH", f"/admin/keys/{args.id}", _key_body(args))


def _rotate(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("POST", f"/admin/keys/{args.id}/rotate", {"grace_seconds": args.grace})


def _revoke(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("POST", f"/admin/keys/{args.id}/revoke")


def _audit(client: AdminClient, args: argparse.Namespace) -> Any:
    return client.call("GET", f"/admin/audit?limit={args.limit}")


def call(run: Verb, args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        answer = run(AdminClient.from_args(args), args)
    except AdminCallFailed as exc:
        print(f"gateway keys {args.action}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answer, indent=2), file=out)
    else:
        write_answer(answer, out)
    return 0


def write_answer(answer: Any, out: TextIO) -> None:
    if isinstance(answer, dict) and answer.get("object") == "list":
        rows = answer["data"]
        if rows and "action" in rows[0]:
            for row in rows:
                print(
                    f"{row['at']}  {row['actor']:<12} {row['action']:<14} {row['target']:<20} "
                    f"{row['detail']}",
                    file=out,
                )
            return
        for row in rows:
            print(_line(row), file=out)
        return
    if isinstance(answer, dict):
        print(_line(answer), file=out)
        if "key" in answer and isinstance(answer["key"], str):
            print(f"key: {answer['key']}", file=out)
            print("(shown once: store it now; the gateway keeps only its hash)", file=out)


def _line(row: dict[str, Any]) -> str:
    parts = [f"{row.get('object', '')} {row['id']}"]
    for name in ("tenant", "source", "status", "hint"):
        if row.get(name) not in (None, ""):
            parts.append(f"{name}={row[name]}")
    if row.get("object") == "tenant":
        parts.append(f"keys={row.get('keys', 0)}")
    if row.get("models"):
        parts.append("models=" + ",".join(row["models"]))
    if row.get("limits"):
        parts.append("limits=" + ",".join(f"{k}:{v}" for k, v in row["limits"].items()))
    for budget in row.get("budgets") or ():
        parts.append(f"budget=${budget['usd']}/{budget.get('period', 'month')}")
    if row.get("previous_valid_until"):
        until = datetime.fromtimestamp(row["previous_valid_until"], UTC).isoformat(
            timespec="seconds"
        )
        parts.append(f"old key valid until {until}")
    if row.get("deleted"):
        parts.append("deleted")
    return "  ".join(parts)


def run_hash(args: argparse.Namespace) -> int:
    key = args.key
    if key is None:
        key = sys.stdin.readline().strip() if not sys.stdin.isatty() else getpass.getpass("key: ")
    if not key:
        print("no key given", file=sys.stderr)
        return 1
    print(_hash_key(key))
    return 0


def run_new(args: argparse.Namespace) -> int:
    key = args.prefix + secrets.token_urlsafe(32)
    print(f"key:  {key}")
    print(f"hash: {_hash_key(key)}")
    return 0


def _hash_key(key: str) -> str:
    # imported here: gateway.admin brings the Redis client along (half a second of
    # every `gateway keys` call, and only `hash` and `new` hash anything)
    from gateway.admin.client_keys import hash_key

    return hash_key(key)
