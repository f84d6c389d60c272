"""A real continuous-batching server for the gateway: llama.cpp's `llama-server`.

    .venv/bin/python tools/real_backend.py build            # once: compile into .cache/
    .venv/bin/python tools/real_backend.py model --seed 0   # the tiny model's path
    .venv/bin/python tools/real_backend.py serve --replicas 2 --parallel 4

`make real-backend` runs `build` then `serve`: N replicas on free ports, their OpenAI
base URLs printed as a pool's `urls:` (with `metrics_style: llamacpp`); Ctrl-C stops
them. Where the build is impossible (no cmake or C++ compiler) it says so and exits 0,
so the target is safe in any checkout.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.llamacpp.build import Layout, build, finished_build, missing_tools, why_not_built
from tools.llamacpp.replicas import ServerOptions, running_replicas
from tools.llamacpp.tiny_model import Shape, file_digest, tiny_model


def command_build(args: argparse.Namespace) -> int:
    layout = Layout.default()
    if missing_tools():
        print(f"skipped: {why_not_built(layout)}")
        return 0
    record = build(layout, jobs=args.jobs)
    print(
        f"llama-server (llama-cpp-python {record.llama_cpp_python}) at {layout.server}: "
        f"{record.server_bytes / 1e6:.1f} MB binary, {record.build_dir_bytes / 1e6:.0f} MB "
        f"build folder, built in {record.build_seconds:.0f} s"
    )
    return 0


def command_model(args: argparse.Namespace) -> int:
    layout = Layout.default()
    if finished_build(layout) is None:
        print(f"skipped: {why_not_built(layout)}")
        return 1
    path = tiny_model(layout.models, layout.vocabulary, seed=args.seed, shape=Shape())
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, sha256 {file_digest(path)[:16]}...)")
    return 0


def command_serve(args: argparse.Namespace) -> int:
    layout = Layout.default()
    if finished_build(layout) is None:
        print(f"skipped: {why_not_built(layout)}")
        return 0 if missing_tools() else 1
    model = tiny_model(layout.models, layout.vocabulary, seed=args.seed, shape=Shape())
    options = ServerOptions(parallel=args.parallel, context_per_slot=args.context_per_slot)
    with running_replicas(layout.server, model, args.replicas, options) as servers:
        print("llama-server replicas ready; a pool for them:")
        print("  replicas:\n    metrics_style: llamacpp\n    urls:")
        for server in servers:
            print(f"      - {server.base_url}")
        print("Ctrl-C stops them.", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while all(server.alive for server in servers):
                time.sleep(0.5)
        except KeyboardInterrupt:
            return 0
        dead = [server for server in servers if not server.alive]
        print(f"a replica exited:\n{dead[0].log_tail()}", file=sys.stderr)
        return 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="compile llama-server into the cache")
    build_parser.add_argument("--jobs", type=int, default=2)
    model_parser = commands.add_parser("model", help="generate the tiny model; print its path")
    model_parser.add_argument("--seed", type=int, default=0)
    serve_parser = commands.add_parser("serve", help="run N replicas until Ctrl-C")
    serve_parser.add_argument("--replicas", type=int, default=2)
    serve_parser.add_argument("--parallel", type=int, default=4, help="slots per replica")
    serve_parser.add_argument("--context-per-slot", type=int, default=4096)
    serve_parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    handlers = {"build": command_build, "model": command_model, "serve": command_serve}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
