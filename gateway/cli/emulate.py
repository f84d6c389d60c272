"""`gateway emulate --port N [...]`: a continuous-batching GPU backend emulator."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.emulator.cli import add_arguments, options_from_args
from gateway.emulator.server import serve


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "emulate", help="run an emulated SGLang-like GPU backend (OpenAI-compatible)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    add_arguments(parser)
    parser.set_defaults(func=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
    except ValueError as error:
        args.parser.error(str(error))
    serve(options, args.host, args.port)
    return 0
