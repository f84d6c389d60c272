"""`gateway serve | dev | check | keys | emulate | route | spend`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# each module exposes register(subparsers); listed here so the order of --help is stable
_COMMANDS = ("serve", "dev", "check", "keys", "emulate", "route", "spend")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only `only`'s: a command loads no other command's
    modules (`gateway serve` never imports the offline training that `route` uses)."""
    parser = argparse.ArgumentParser(
        prog="gateway", description="OpenAI-compatible cost-and-model routing gateway."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"gateway.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gateway.cli.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    command = given[0] if given and given[0] in _COMMANDS else None
    args = build_parser(command).parse_args(given)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
