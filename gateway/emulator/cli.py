"""Command-line flags of `gateway emulate` (and `python -m gateway.emulator`).

`add_arguments` adds every emulator flag except `--host`/`--port`, which the caller owns;
`options_from_args` turns the parsed flags into `EmulatorOptions`.
"""

from __future__ import annotations

import argparse

from gateway.emulator.options import EmulatorOptions
from gateway.emulator.profiles import PROFILES
from gateway.emulator.tokenizer import TOKENIZERS


def _token_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX tokens, got {text!r}") from None
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"expected 1 <= MIN <= MAX, got {text!r}")
    return first, last


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("served model")
    model.add_argument(
        "--model",
        default="emulated-model",
        help="served model name (any requested name is accepted)",
    )
    model.add_argument("--seed", type=int, default=0, help="seed of the generated text")
    model.add_argument(
        "--output-tokens",
        type=_token_range,
        default=(16, 256),
        metavar="MIN:MAX",
        help="range of reply lengths when no max_tokens binds (default 16:256)",
    )
    model.add_argument(
        "--tokenizer",
        choices=sorted(TOKENIZERS),
        default="approx",
        help="prompt tokenization: approx (4 bytes/token, fast) or cl100k",
    )

    gpu = parser.add_argument_group("emulated GPU and scheduler")
    gpu.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="h100",
        help="GPU cost profile (default h100)",
    )
    gpu.add_argument(
        "--max-running-requests",
        type=int,
        default=None,
        help="batch size limit (default: the profile's)",
    )
    gpu.add_argument(
        "--kv-cache-tokens",
        type=int,
        default=None,
        help="KV cache capacity in tokens (default: the profile's)",
    )
    gpu.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=None,
        help="prefill token budget per step (default: the profile's)",
    )
    gpu.add_argument("--page-size", type=int, default=16, help="tokens per KV cache page")
    gpu.add_argument(
        "--static-batching",
        action="store_true",
        help="admit a new batch only when the whole batch has finished",
    )
    gpu.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per GPU second: 1 real time, 0.01 100x faster, "
        "0 answer at once without scheduling",
    )
    gpu.add_argument(
        "--metrics-style",
        choices=("sglang", "vllm"),
        default="sglang",
        help="metric names on /metrics (default sglang)",
    )

    faults = parser.add_argument_group("fault injection")
    faults.add_argument(
        "--fail-rate",
        type=float,
        default=0.0,
        help="fraction of chat completions answered with an error",
    )
    faults.add_argument(
        "--fail-status",
        type=int,
        default=503,
        help="HTTP status of injected failures (default 503)",
    )
    faults.add_argument(
        "--slow-start-ms",
        type=float,
        default=0.0,
        help="wall-clock delay before handling each chat completion",
    )
    faults.add_argument(
        "--crash-after",
        type=int,
        default=None,
        metavar="N",
        help="exit the process after answering N chat completions",
    )


def options_from_args(args: argparse.Namespace) -> EmulatorOptions:
    min_tokens, max_tokens = args.output_tokens
    return EmulatorOptions(
        model=args.model,
        seed=args.seed,
        profile=args.profile,
        max_running_requests=args.max_running_requests,
        kv_cache_tokens=args.kv_cache_tokens,
        chunked_prefill_size=args.chunked_prefill_size,
        page_size=args.page_size,
        static_batching=args.static_batching,
        time_scale=args.time_scale,
        metrics_style=args.metrics_style,
        tokenizer=args.tokenizer,
        min_output_tokens=min_tokens,
        max_output_tokens=max_tokens,
        fail_rate=args.fail_rate,
        fail_status=args.fail_status,
        slow_start_ms=args.slow_start_ms,
        crash_after=args.crash_after,
    )
