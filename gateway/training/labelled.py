"""Labelled prompts (how a strong and a weak model did on each), the folds they are split
into, and parsing them from JSON lines: shared by training, calibration and the bench.

The shipped format (data/routing/*.jsonl): `id`, `prompt`, and one of
`strong_correct` / `weak_correct` (booleans: MMLU, GSM8K), `strong_score` / `weak_score`
(judge grades 1-10: MT-Bench) or `strong_quality` / `weak_quality` (0-1: who won a
pairwise judgment, AlpacaEval). An optional `source` says where the prompt was collected
(the unit the chat evidence holds out); optional `turns` (the conversation's user turns)
keeps a conversation's rows in one fold. A tenant's own labelled traffic in any of these
shapes calibrates the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FOLDS = 5
FOLD_SEED = 20
# the fold every shipped (and `route train`-ed) scorer leaves out, for calibration
HOLDOUT_FOLD = 0
# the labelled data of a checkout (not packaged: a wheel has no data/ folder)
SHIPPED_DATA = Path(__file__).resolve().parents[2] / "data" / "routing"
SHIPPED_BENCHMARKS = ("mmlu", "gsm8k", "mt_bench")


@dataclass(frozen=True)
class LabelledPrompt:
    id: str
    benchmark: str
    prompt: str
    # quality of each model's answer on a 0-1 scale (right/wrong, or judge grade / 10)
    strong: float
    weak: float
    # where the prompt was collected (AlpacaEval's helpful_base, koala, ...); the
    # benchmark itself for sets collected in one place
    source: str = ""
    # the conversation's first user turn, when the prompt is a later one (`turns`)
    thread: str = ""
    # the request kind (code, math, extraction, writing, chat, other) the gateway's
    # evaluation gave it; "" where the file does not say
    kind: str = ""

    @property
    def origin(self) -> str:
        return self.source or self.benchmark

    @property
    def group(self) -> str:
        """Rows sharing this land in one fold: exact duplicates, MMLU questions that
        share a reading passage (their first 300 characters are the passage), and the
        follow-ups of one conversation (its first turn)."""
        return " ".join((self.thread or self.prompt)[:300].split())

    @property
    def strong_needed(self) -> float:
        """The training label: the strong model did strictly better."""
        return 1.0 if self.strong > self.weak else 0.0


def fold_of(row: LabelledPrompt, folds: int = FOLDS, seed: int = FOLD_SEED) -> int:
    digest = hashlib.sha256(f"{seed}:{row.group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % folds


class LabelError(ValueError):
    """A line that is not a labelled prompt; says which line and what is missing."""


def parse_line(line: str, where: str) -> LabelledPrompt:
    try:
        item = json.loads(line)
        if "strong_quality" in item:
            strong = float(item["strong_quality"])
            weak = float(item["weak_quality"])
        elif "strong_score" in item:
            strong = float(item["strong_score"]) / 10
            weak = float(item["weak_score"]) / 10
        else:
            strong = 1.0 if item["strong_correct"] else 0.0
            weak = 1.0 if item["weak_correct"] else 0.0
        return LabelledPrompt(
            id=str(item["id"]),
            benchmark=str(item.get("benchmark", "custom")),
            prompt=str(item["prompt"]),
            strong=strong,
            weak=weak,
            source=str(item.get("source", "")),
            thread=_first_turn(item.get("turns")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LabelError(
            f"{where}: expected a JSON object with id, prompt and strong_correct/weak_correct, "
            f"strong_score/weak_score or strong_quality/weak_quality ({type(exc).__name__}: {exc})"
        ) from exc


# what `gateway route labels export` writes, one JSON object a line
EXPORT_KEYS = ("id", "prompt", "strong_quality", "weak_quality")
EXPORT_TEXT_KEYS = ("source", "kind", "route", "served_model", "reference_model")


def parse_export_line(line: str, where: str) -> LabelledPrompt:
    """One line of `gateway route labels export`: `id`, `prompt`, `strong_quality` (the
    reference model's judged quality, 0-1) and `weak_quality` (the served model's), with
    optional `source`, `kind`, `route`, `served_model`, `reference_model`. Stricter than
    `parse_line`: another format (benchmark booleans, grades) is refused by line."""
    problem = _export_problem(line)
    if problem is not None:
        raise LabelError(
            f"{where}: not a line of `gateway route labels export` ({problem}); expected a "
            "JSON object with id, prompt, strong_quality and weak_quality (0-1)"
        )
    item = json.loads(line)
    return LabelledPrompt(
        id=str(item["id"]),
        benchmark="labels",
        prompt=item["prompt"],
        strong=float(item["strong_quality"]),
        weak=float(item["weak_quality"]),
        source=str(item.get("source") or ""),
        kind=str(item.get("kind") or ""),
    )


def _export_problem(line: str) -> str | None:
    try:
        item = json.loads(line)
    except ValueError:
        return "not JSON"
    if not isinstance(item, dict):
        return f"a JSON {type(item).__name__}, not an object"
    missing = [key for key in EXPORT_KEYS if key not in item]
    if missing:
        return "missing " + ", ".join(missing)
    if not isinstance(item["id"], str | int) or not isinstance(item["prompt"], str):
        return "id and prompt must be a string"
    for key in ("strong_quality", "weak_quality"):
        value = item[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            return f"{key} must be a number from 0 to 1, got {value!r}"
    for key in EXPORT_TEXT_KEYS:
        if item.get(key) is not None and not isinstance(item[key], str):
            return f"{key} must be a string"
    return None


def stratified_folds(rows: Sequence[LabelledPrompt], folds: int = FOLDS) -> list[int]:
    """Each row's fold, every fold holding about the same number of rows and the same mix
    of outcomes (the strong model better, tied, worse): groups (`group`) are taken in a
    hashed order within each outcome and dealt round-robin. A hash fold alone leaves a
    50-row set with a fold of 4 rows about half the time; this one never does. A group
    lands in one fold (its first row's outcome places it)."""
    order: dict[str, int] = {}
    outcome: dict[str, int] = {}
    for row in rows:
        if row.group not in outcome:
            gain = row.strong - row.weak
            outcome[row.group] = 0 if gain > 0 else (1 if gain == 0 else 2)
            order[row.group] = int.from_bytes(
                hashlib.sha256(f"{FOLD_SEED}:{row.group}".encode()).digest()[:8], "big"
            )
    fold_of_group: dict[str, int] = {}
    dealt = 0
    for stratum in (0, 1, 2):
        groups = sorted((g for g, o in outcome.items() if o == stratum), key=order.__getitem__)
        for group in groups:
            fold_of_group[group] = dealt % folds
            dealt += 1
    return [fold_of_group[row.group] for row in rows]


def _first_turn(turns: object) -> str:
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        return turns[0]
    return ""


def parse_lines(lines: Iterable[str], source: str) -> list[LabelledPrompt]:
    return [
        parse_line(line, f"{source}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]


def read_files(paths: Sequence[Path]) -> list[LabelledPrompt]:
    """Every labelled prompt of these JSON-lines files, in order."""
    rows: list[LabelledPrompt] = []
    for path in paths:
        rows += parse_lines(path.read_text(encoding="utf-8").splitlines(), str(path))
    return rows


def shipped_benchmarks(data_dir: Path = SHIPPED_DATA) -> list[LabelledPrompt]:
    """The shipped MMLU, GSM8K and MT-Bench labels (data/routing, from RouteLLM)."""
    return read_files([data_dir / f"{name}.jsonl" for name in SHIPPED_BENCHMARKS])
