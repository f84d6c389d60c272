"""The request-kind classifier (gateway/routing/kinds.py): its speed on a 2 KB prompt and
its confusion on the shipped labelled sets whose rows say what kind of request they are.

    python -m bench.request_kinds

The expected kind of each set is a mapping written here (GSM8K is maths, MMLU is an
exam-style multiple-choice question = other, MT-Bench and HelloBench rows carry their own
category); the classifier never saw these rows while its patterns were written, but they
were looked at while choosing the mapping, so the table is not a held-out number.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from gateway.routing.kinds import KINDS, request_kind

DATA = Path(__file__).resolve().parents[1] / "data" / "routing"

MT_BENCH = {
    "coding": "code",
    "math": "math",
    "extraction": "extraction",
    "writing": "writing",
    "roleplay": "writing",
    "humanities": "chat",
    "stem": "chat",
    "reasoning": "other",
}
HELLOBENCH = {
    "hellobench_chat": "chat",
    "hellobench_open_ended_qa": "chat",
    "hellobench_summarization": "extraction",
    "hellobench_heuristic_text_generation": "writing",
    "hellobench_text_completion": "writing",
}


def expected_rows() -> list[tuple[str, str, str]]:
    """(set, expected kind, prompt) for every row whose kind the set says."""
    rows: list[tuple[str, str, str]] = []
    for line in (DATA / "gsm8k.jsonl").read_text().splitlines():
        rows.append(("gsm8k", "math", json.loads(line)["prompt"]))
    for number, line in enumerate((DATA / "mmlu.jsonl").read_text().splitlines()):
        if number % 10 == 0:  # a tenth of 14k: enough for a share
            rows.append(("mmlu", "other", json.loads(line)["prompt"]))
    for line in (DATA / "mt_bench.jsonl").read_text().splitlines():
        item = json.loads(line)
        rows.append(("mt_bench", MT_BENCH[item["category"]], item["prompt"]))
    for line in (DATA / "hellobench.jsonl").read_text().splitlines():
        item = json.loads(line)
        rows.append(("hellobench", HELLOBENCH[item["source"]], item["prompt"]))
    return rows


def speed() -> None:
    """CPU time per call (process time, so a busy machine's waiting is not counted), with
    `str.lower` + `str.split` of the same 2 KB as a yardstick for the machine's speed."""
    prompt = ("Please read the report below and tell me what you think of it. " * 40)[:2048]
    rounds = 20000

    def per_call(call: Callable[[], object]) -> float:
        for _ in range(1000):
            call()
        started = time.process_time()
        for _ in range(rounds):
            call()
        return (time.process_time() - started) / rounds * 1e6

    kind = per_call(lambda: request_kind(prompt))
    yardstick = per_call(lambda: prompt.lower().split())
    print("| call on a 2 KB prompt | CPU us a call |")
    print("| --- | --- |")
    print(f"| request_kind (no pattern matches early: the slowest path) | {kind:.1f} |")
    print(f"| yardstick: prompt.lower().split() | {yardstick:.1f} |\n")


def confusion() -> None:
    rows = expected_rows()
    by_set: dict[str, Counter[tuple[str, str]]] = {}
    for name, expected, prompt in rows:
        by_set.setdefault(name, Counter())[expected, request_kind(prompt)] += 1
    header = "| set | expected | n | " + " | ".join(KINDS) + " | agree |"
    print(header)
    print("|" + " --- |" * (len(KINDS) + 4))
    for name, counts in by_set.items():
        for expected in KINDS:
            n = sum(c for (e, _), c in counts.items() if e == expected)
            if n == 0:
                continue
            cells = " | ".join(str(counts[expected, got]) for got in KINDS)
            share = counts[expected, expected] / n
            print(f"| {name} | {expected} | {n} | {cells} | {share:.0%} |")
    agree = sum(1 for _, e, p in rows if request_kind(p) == e)
    print(f"\nall rows: {agree} of {len(rows)} agree ({agree / len(rows):.0%})")


if __name__ == "__main__":
    speed()
    confusion()
