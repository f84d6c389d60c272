#!/usr/bin/env python3
"""Rebuild data/routing/alpaca_eval.jsonl (chat prompts with per-model judgments) from
tatsu-lab/alpaca_eval.

Usage:
    python3 build_alpaca_eval.py REPO [--commit SHA] [--out FILE]

REPO is a git directory of github.com/tatsu-lab/alpaca_eval (a bare mirror or a clone).
Files are read with `git show COMMIT:PATH`; only the standard library is used; the
output is byte-for-byte reproducible.

What it reads: for every judged model below, results/<model>/
alpaca_eval_cot_gpt4_turbo_fn/annotations.json. That is one GPT-4-Turbo judge
(AlpacaEval's chain-of-thought ranking annotator) comparing the model's answer with the
reference answer of gpt4_1106_preview (GPT-4 Turbo) on each of the 805 AlpacaEval
instructions: `preference` 1 = the reference is better, 2 = the model's answer is
better, 1.5 = a tie. One annotator for every model, so the judgments share one scale.
(The larger `weighted_alpaca_eval_gpt4_turbo` files of most of these models are not in
the repository snapshot, so that annotator is not used.)

Each output row: `id`, `benchmark` ("alpaca_eval"), `source` (AlpacaEval's own `dataset`
field: helpful_base, koala, oasst, selfinstruct, vicuna: where the instruction was
collected), `prompt` (the instruction, verbatim), `judged` (model -> its win against the
reference, 0 / 0.5 / 1, null where the judge gave none), and the two-tier pair
RouteLLM's data uses: `strong_model` gpt4_1106_preview, `weak_model` Mixtral-8x7B, with
`strong_quality` / `weak_quality` = who won that pairwise judgment (1 / 0, 0.5 each
on a tie).
"""

import argparse
import json
import subprocess

DEFAULT_COMMIT = "cd543a149df89434d8a54582c0151c0b945c3d20"
ANNOTATOR = "alpaca_eval_cot_gpt4_turbo_fn"
REFERENCE = "gpt4_1106_preview"
WEAK = "Mixtral-8x7B-Instruct-v0.1"
# every model this annotator judged in the snapshot, except the reference against itself
JUDGED = (
    "gpt4",
    "claude-2.1",
    "gemini-pro",
    "Mixtral-8x7B-Instruct-v0.1",
    "llama-2-70b-chat-hf",
    "tulu-2-dpo-70b",
    "cohere",
    "Mistral-7B-Instruct-v0.2",
    "vicuna-33b-v1.3",
    "gpt-3.5-turbo-0301",
    "alpaca-7b",
)


def git_show(repo, commit, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True
    ).stdout.decode("utf-8")


def win(preference):
    """The judged model's win against the reference: 1, 0.5 (tie) or 0; None if absent."""
    if preference is None or str(preference) in ("None", "nan", ""):
        return None
    value = float(preference)
    if value not in (1.0, 1.5, 2.0):
        raise ValueError(f"unexpected preference {preference!r}")
    return value - 1.0


def build(repo, commit):
    order = []
    rows = {}
    for model in JUDGED:
        path = f"results/{model}/{ANNOTATOR}/annotations.json"
        annotations = json.loads(git_show(repo, commit, path))
        if len(annotations) != 805:
            raise ValueError(f"{path}: {len(annotations)} annotations, expected 805")
        for item in annotations:
            if item["generator_1"] != REFERENCE or item["generator_2"] != model:
                raise ValueError(f"{path}: not {model} against {REFERENCE}")
            key = item["instruction"]
            if key not in rows:
                if model != JUDGED[0]:
                    raise ValueError(f"{path}: instruction not judged for {JUDGED[0]}")
                order.append(key)
                rows[key] = {"source": item["dataset"], "judged": {}}
            rows[key]["judged"][model] = win(item["preference"])
    out = []
    for index, key in enumerate(order):
        row = rows[key]
        if len(row["judged"]) != len(JUDGED):
            raise ValueError(f"instruction {index} misses a judged model")
        weak = row["judged"][WEAK]
        out.append(
            {
                "id": f"alpaca_eval-{index}",
                "benchmark": "alpaca_eval",
                "source": row["source"],
                "prompt": key,
                "strong_model": REFERENCE,
                "weak_model": WEAK,
                "strong_quality": 1.0 - weak,
                "weak_quality": weak,
                "judged": row["judged"],
            }
        )
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--out", default="alpaca_eval.jsonl")
    args = parser.parse_args()
    rows = build(args.repo, args.commit)
    with open(args.out, "w", encoding="ascii", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=True, sort_keys=False) + "\n")
    sources = {}
    for row in rows:
        sources[row["source"]] = sources.get(row["source"], 0) + 1
    print(f"wrote {len(rows)} rows to {args.out}: {sources}")


if __name__ == "__main__":
    main()
