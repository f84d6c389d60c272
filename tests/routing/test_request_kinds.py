"""The request-kind classifier on the shipped labelled sets whose rows say their kind
(bench/request_kinds.py prints the whole confusion table): it is heuristic, so these
floors are what it was measured to do, not what a kind classifier can do."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gateway.routing.kinds import KINDS, request_kind

DATA = Path(__file__).resolve().parents[2] / "data" / "routing"


def prompts(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


def share(rows: list[dict[str, str]], kind: str) -> float:
    counts = Counter(request_kind(row["prompt"]) for row in rows)
    return counts[kind] / len(rows)


def test_gsm8k_is_math() -> None:
    assert share(prompts("gsm8k"), "math") >= 0.9


def test_mmlu_multiple_choice_is_other() -> None:
    assert share(prompts("mmlu")[::20], "other") >= 0.9


@pytest.mark.parametrize(
    ("source", "kind", "floor"),
    [
        ("hellobench_summarization", "extraction", 0.8),
        ("hellobench_heuristic_text_generation", "writing", 0.75),
    ],
)
def test_hellobench_sets_by_their_task(source: str, kind: str, floor: float) -> None:
    rows = [row for row in prompts("hellobench") if row["source"] == source]
    assert share(rows, kind) >= floor


def test_mt_bench_coding_is_code() -> None:
    rows = [row for row in prompts("mt_bench") if row["category"] == "coding"]
    assert share(rows, "code") == 1.0


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Write a Python function that reverses a linked list.", "code"),
        ("```\nSELECT * FROM users;\n```\nwhy is this slow?", "code"),
        ("A train leaves at 3 pm at 60 km/h. How many km has it gone by 5 pm?", "math"),
        ("Extract every date from the following text: the meeting moved to May 3.", "extraction"),
        ("Write a short poem about autumn leaves.", "writing"),
        ("What do you think about remote work?", "chat"),
        ("", "other"),
    ],
)
def test_plain_examples(text: str, kind: str) -> None:
    assert request_kind(text) == kind


def test_every_answer_is_a_declared_kind_and_a_long_text_is_read_in_part() -> None:
    long_text = "Summarize the key points. " + "word " * 5000
    assert request_kind(long_text) in KINDS
    assert request_kind(long_text) == "extraction"
