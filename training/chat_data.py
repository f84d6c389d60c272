"""The shipped chat labels as the word-table recipes read them: every labelled prompt,
the chat sets and their sources, and each chat row's soft "the strong model is needed"
target (data/routing/README.md says where each set comes from)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.training.fitting import balanced_weights
from gateway.training.labelled import (
    SHIPPED_BENCHMARKS,
    SHIPPED_DATA,
    LabelledPrompt,
    parse_lines,
)

CHAT_FILE = "alpaca_eval"
ALPACA_COLLECTIONS = ("helpful_base", "koala", "oasst", "selfinstruct", "vicuna")
HELLOBENCH_TASKS = tuple(
    f"hellobench_{task}"
    for task in (
        "open_ended_qa",
        "summarization",
        "chat",
        "text_completion",
        "heuristic_text_generation",
    )
)
# set -> its sources, in table order
CHAT_SETS: dict[str, tuple[str, ...]] = {
    CHAT_FILE: ALPACA_COLLECTIONS,
    "mt_bench": ("mt_bench",),
    "oa_qlora": ("oa_qlora",),
    "hellobench": HELLOBENCH_TASKS,
}
CHAT_SOURCES = tuple(s for sources in CHAT_SETS.values() for s in sources)
# the label files beside the benchmarks (MT-Bench is one of the benchmarks)
CHAT_FILES = (CHAT_FILE, "oa_qlora", "hellobench")
EXAM = ("mmlu", "gsm8k")
# a multi-model set's strong model, and the judged models left out of its difficulty
# (the other GPT-4 of AlpacaEval is as strong as the reference)
MULTI_MODEL: dict[str, tuple[str, tuple[str, ...]]] = {
    CHAT_FILE: ("gpt4_1106_preview", ("gpt4",)),
    "hellobench": ("gpt4o_0806", ()),
}
# MT-Bench grade gaps (grades / 10) are mostly 0.05-0.5: 0.15 is a clear win
MT_GAIN_SCALE = 0.15


def load_chat_training(data_dir: Path = SHIPPED_DATA) -> list[LabelledPrompt]:
    """Every shipped labelled prompt: the three benchmarks, then the chat files."""
    rows: list[LabelledPrompt] = []
    for name in (*SHIPPED_BENCHMARKS, *CHAT_FILES):
        path = data_dir / f"{name}.jsonl"
        rows += parse_lines(path.read_text(encoding="utf-8").splitlines(), str(path))
    return rows


def other_models_difficulty(
    name: str = CHAT_FILE, data_dir: Path = SHIPPED_DATA, excludes: tuple[str, ...] = ()
) -> dict[str, float]:
    """Prompt id -> the share of a multi-model set's cheaper judged models that did worse
    than its strong model on it (ties count half), leaving out `excludes` too.
    AlpacaEval's `judged` values are wins against the strong model (the reference);
    HelloBench's are each model's own score."""
    strong, too_strong = MULTI_MODEL[name]
    out: dict[str, float] = {}
    for line in (data_dir / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        judged = {
            model: float(v)
            for model, v in item["judged"].items()
            if v is not None and model != strong and model not in (*too_strong, *excludes)
        }
        if name == CHAT_FILE:
            lost = [1.0 - v for v in judged.values()]
        else:
            mine = float(item["judged"][strong])
            lost = [1.0 if v < mine else 0.5 if v == mine else 0.0 for v in judged.values()]
        out[item["id"]] = sum(lost) / len(lost)
    return out


def chat_targets(
    rows: Sequence[LabelledPrompt], data_dir: Path = SHIPPED_DATA
) -> npt.NDArray[np.float64]:
    """Each row's soft 'the strong model is needed' target in [0, 1], NaN on exam rows:
    the multi-model difficulty where a set judged many models, MT-Bench's grade gap
    scaled, and the pair's own pairwise verdict on OA."""
    multi = {name: other_models_difficulty(name, data_dir) for name in MULTI_MODEL}
    out = np.full(len(rows), np.nan)
    for i, row in enumerate(rows):
        if row.benchmark in multi:
            out[i] = multi[row.benchmark][row.id]
        elif row.benchmark == "mt_bench":
            out[i] = 0.5 + 0.5 * max(-1.0, min(1.0, (row.strong - row.weak) / MT_GAIN_SCALE))
        elif row.benchmark not in EXAM:
            out[i] = row.strong
    return out


def per_origin_weights(rows: Sequence[LabelledPrompt]) -> npt.NDArray[np.float64]:
    """Every source weighs the same in all, whatever its row count."""
    return balanced_weights(rows, group=lambda row: row.origin)
