"""`python -m gateway.emulator --port N [flags]`: one emulated replica."""

from __future__ import annotations

import argparse

from gateway.emulator.cli import add_arguments, options_from_args
from gateway.emulator.server import serve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.emulator",
        description="An OpenAI-compatible continuous-batching GPU backend emulator.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    serve(options, args.host, args.port)


if __name__ == "__main__":
    main()
