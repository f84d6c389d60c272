"""Would a cascade rank chat where a prompt router cannot? The measurement behind the
"cascade" lines of docs/learned-routing.md (nothing of it ships).

A cascade asks the cheap model first and escalates to the strong one when the cheap
answer looks wanting. Its router sees the cheap model's *answer*, which no prompt router
can. The labelled sets keep their weak model's answers in the repositories they were
built from, so the signal can be measured without calling a model: each prompt is
scored by its weak answer, and ranked against the same strong-vs-weak labels as
bench/chat_holdout.py. Two scores:

- the weak answer's length (longer = escalate): one number, nothing learned, so every
  set is unseen;
- twelve numbers about the weak answer (length, lines, list items, code, a refusal, an
  unfinished last sentence, repeated words, a script unlike the prompt's, questions
  back, headers, and the prompt's length), a ridge regression trained on the other
  chat sets and scored on the one left out.

It reads git mirrors fetched beforehand (the commits data/routing/README.md names):

    python bench/cascade_signal.py --alpaca-eval M/tatsu-lab+alpaca_eval/repo \\
        --qlora M/artidoro+qlora/repo --hellobench M/Quehry+HelloBench/repo \\
        --routellm M/lm-sys+RouteLLM/repo
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.training.fitting import evidence

DATA = Path(__file__).resolve().parent.parent / "data" / "routing"
COMMITS = {
    "alpaca_eval": "cd543a149df89434d8a54582c0151c0b945c3d20",
    "qlora": "7f4e95a68dc076bea9b3a413d2b512eca6d004e5",
    "hellobench": "d403282968b0a61a4963a73c631d3fc1318f17d7",
    "routellm": "0b64fdafe049e596a3f5657c219329f24af24198",
}
HELLOBENCH_TASKS = (
    "open_ended_qa",
    "summarization",
    "chat",
    "text_completion",
    "heuristic_text_generation",
)
_REFUSAL = re.compile(
    r"\b(I'm sorry|I am sorry|I cannot|I can't|As an AI|as a language model|I'm not able"
    r"|I am not able|I'm unable|I am unable|I apologi[sz]e)",
    re.IGNORECASE,
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s", re.MULTILINE)
_HEADER = re.compile(r"^\s*#{1,6}\s|^\*\*[^*\n]+\*\*\s*$", re.MULTILINE)
_WORD = re.compile(r"\w+")
_ENDS = ".!?)\"'`*:;>]}\u3002\uff01\uff1f"

csv.field_size_limit(sys.maxsize)


class LabelledAnswer:
    def __init__(self, prompt: str, answer: str, strong: float, weak: float) -> None:
        self.prompt, self.answer, self.strong, self.weak = prompt, answer, strong, weak


def git_show(repo: Path, commit: str, path: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True
    )
    return done.stdout.decode("utf-8")


def shipped(name: str) -> list[dict[str, object]]:
    text = (DATA / f"{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def quality(row: dict[str, object], key: str) -> float:
    value = row[key]
    assert isinstance(value, int | float)
    return float(value)


def alpaca_eval(repo: Path) -> list[LabelledAnswer]:
    path = "results/Mixtral-8x7B-Instruct-v0.1/model_outputs.json"
    outputs = json.loads(git_show(repo, COMMITS["alpaca_eval"], path))
    out = []
    for row in shipped("alpaca_eval"):
        answer = outputs[int(str(row["id"]).rsplit("-", 1)[1])]
        assert answer["instruction"].strip() == str(row["prompt"]).strip()
        out.append(LabelledAnswer(str(row["prompt"]), answer["output"], *labels(row)))
    return out


def oa(repo: Path) -> list[LabelledAnswer]:
    path = "eval/generations/oa/gpt-3.5-oa-generations.jsonl"
    answers = {}
    for line in git_show(repo, COMMITS["qlora"], path).splitlines():
        item = json.loads(line)
        answers[item["message_id"]] = item["generation"]
    return [
        LabelledAnswer(
            str(row["prompt"]), answers[str(row["id"])[len("oa_qlora-") :]], *labels(row)
        )
        for row in shipped("oa_qlora")
    ]


def hellobench(repo: Path) -> list[LabelledAnswer]:
    answers: dict[str, str] = {}
    for task in HELLOBENCH_TASKS:
        path = f"results/judgements/main_exp/llama31_8b/{task}_results.jsonl"
        for line in git_show(repo, COMMITS["hellobench"], path).splitlines():
            if line.strip():
                item = json.loads(line)
                answers.setdefault(item["id"], item["response"])  # the build keeps the first
    return [
        LabelledAnswer(
            str(row["prompt"]), answers[str(row["id"])[len("hellobench-") :]], *labels(row)
        )
        for row in shipped("hellobench")
    ]


def mt_bench(repo: Path) -> list[LabelledAnswer]:
    """Mixtral's first-turn answer, read from its GPT-4 judgement (the only copy)."""
    path = "routellm/evals/mt_bench/judgements.jsonl"
    answers: dict[int, str] = {}
    for line in git_show(repo, COMMITS["routellm"], path).splitlines():
        item = json.loads(line)
        if "Mixtral" in item["model"]:
            found = re.search(r"### Assistant A:\n(.*?)\n\n### User:", item["user_prompt"], re.S)
            if found:
                answers.setdefault(item["question_id"], found.group(1))
    out = []
    for row in shipped("mt_bench"):
        key = int(str(row["id"]).rsplit("-", 1)[1])
        if key in answers:
            strong, weak = quality(row, "strong_score"), quality(row, "weak_score")
            out.append(LabelledAnswer(str(row["prompt"]), answers[key], strong, weak))
    return out


def gsm8k(repo: Path) -> list[LabelledAnswer]:
    path = "routellm/evals/gsm8k/gsm8k_responses.csv"
    rows = list(csv.DictReader(io.StringIO(git_show(repo, COMMITS["routellm"], path), newline="")))
    column = "mistralai/Mixtral-8x7B-Instruct-v0.1_response"
    out = []
    for row in shipped("gsm8k"):
        answer = rows[int(str(row["id"]).rsplit("-", 1)[1])]
        strong = float(bool(row["strong_correct"]))
        weak = float(bool(row["weak_correct"]))
        out.append(LabelledAnswer(str(row["prompt"]), answer[column], strong, weak))
    return out


def labels(row: dict[str, object]) -> tuple[float, float]:
    return quality(row, "strong_quality"), quality(row, "weak_quality")


def _non_latin(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum(ord(c) > 127 for c in letters) / max(1, len(letters))


def answer_features(prompt: str, answer: str) -> list[float]:
    text = answer.strip()
    words = _WORD.findall(text.lower())
    return [
        math.log1p(len(text)),
        math.log1p(len(text)) - math.log1p(len(prompt)),
        math.log1p(text.count("\n")),
        math.log1p(len(_LIST_ITEM.findall(text))),
        float("```" in text),
        float(bool(_REFUSAL.search(text[:400]))),
        float(bool(text) and text[-1] not in _ENDS),
        len(set(words)) / max(1, len(words)),
        abs(_non_latin(prompt) - _non_latin(text)),
        math.log1p(text.count("?")),
        math.log1p(len(_HEADER.findall(text))),
        math.log1p(len(prompt)),
    ]


def rank_target(gain: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each prompt's gain as a 0-1 rank within its set (ties share their mean rank), so
    sets judged on different scales weigh alike."""
    order = np.argsort(gain, kind="stable")
    ranks = np.empty(len(gain))
    ranks[order] = np.arange(len(gain))
    for value in np.unique(gain):
        tied = gain == value
        ranks[tied] = ranks[tied].mean()
    return ranks / max(1, len(gain) - 1)


def ridge(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], w: npt.NDArray[np.float64]
) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    mean, scale = x.mean(0), x.std(0) + 1e-9
    design = np.c_[np.ones(len(x)), (x - mean) / scale]
    penalty = np.eye(design.shape[1])
    penalty[0, 0] = 0.0
    beta = np.linalg.solve(design.T @ (design * w[:, None]) + penalty, design.T @ (w * y))
    return lambda new: np.c_[np.ones(len(new)), (new - mean) / scale] @ beta


def row(name: str, scores: npt.NDArray[np.float64], rows: list[LabelledAnswer]) -> str:
    strong = np.asarray([r.strong for r in rows])
    weak = np.asarray([r.weak for r in rows])
    found = evidence(scores, strong, weak)
    interval, _, at = found.cell().rpartition(" ")
    return f"| {name} | {interval} | {at} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--alpaca-eval", "--qlora", "--hellobench", "--routellm"):
        parser.add_argument(flag, type=Path, required=True, help="a git mirror of the set")
    args = parser.parse_args()
    sets = {
        "AlpacaEval": alpaca_eval(args.alpaca_eval),
        "OA": oa(args.qlora),
        "HelloBench": hellobench(args.hellobench),
        "MT-Bench": mt_bench(args.routellm),
    }
    features = {
        name: np.asarray([answer_features(r.prompt, r.answer) for r in rows])
        for name, rows in sets.items()
    }
    for name, rows in [*sets.items(), ("GSM8K (exam)", gsm8k(args.routellm))]:
        print(f"\n{name} ({len(rows)} prompts)\n| router | APGR (95% interval) | strong @95% |")
        print("| --- | --- | ---: |")
        print(row("random", np.zeros(len(rows)), rows))
        print(row("prompt length", np.log1p([len(r.prompt) for r in rows]), rows))
        print(row("weak answer length", np.log1p([len(r.answer.strip()) for r in rows]), rows))
        if name in sets:
            others = [other for other in sets if other != name]
            x = np.vstack([features[other] for other in others])
            y = np.concatenate(
                [rank_target(np.asarray([r.strong - r.weak for r in sets[o]])) for o in others]
            )
            # every other set weighs the same, whatever its size
            w = np.concatenate([np.full(len(sets[o]), 1000.0 / len(sets[o])) for o in others])
            print(row("weak answer, 12 features, other sets", ridge(x, y, w)(features[name]), rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
