"""`gateway serve | dev | check | keys | emulate | route | spend`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# each module exposes register(subparsers); listed here so the order of --help is stable
_COMMANDS = ("serve", "dev", "check", "keys", "emulate", "route", "spend")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description="OpenAI-compatible cost-and-model routing gateway."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"gateway.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gateway.cli.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
