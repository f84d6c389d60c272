"""`gateway keys hash [KEY]` prints the `sha256:<hex>` form to store in policies/."""

from __future__ import annotations

import argparse
import getpass
import secrets
import sys
from typing import Any

from gateway.pipeline.client_keys import hash_key


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("keys", help="client key helpers")
    actions = parser.add_subparsers(dest="action", required=True)
    hashing = actions.add_parser("hash", help="print the sha256 form of a key")
    hashing.add_argument("key", nargs="?", help="the key (read from stdin or a prompt if absent)")
    hashing.set_defaults(func=run_hash)
    new = actions.add_parser("new", help="generate a random key and print it with its hash")
    new.add_argument("--prefix", default="gw-")
    new.set_defaults(func=run_new)


def run_hash(args: argparse.Namespace) -> int:
    key = args.key
    if key is None:
        key = sys.stdin.readline().strip() if not sys.stdin.isatty() else getpass.getpass("key: ")
    if not key:
        print("no key given", file=sys.stderr)
        return 1
    print(hash_key(key))
    return 0


def run_new(args: argparse.Namespace) -> int:
    key = args.prefix + secrets.token_urlsafe(32)
    print(f"key:  {key}")
    print(f"hash: {hash_key(key)}")
    return 0
