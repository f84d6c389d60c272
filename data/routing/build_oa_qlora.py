#!/usr/bin/env python3
"""Rebuild data/routing/oa_qlora.jsonl (OpenAssistant chat prompts with GPT-4's pairwise
verdicts on gpt-4 against gpt-3.5-turbo) from artidoro/qlora.

Usage:
    python3 build_oa_qlora.py REPO [--commit SHA] [--out FILE] [--sets DIR]

REPO is a git directory of github.com/artidoro/qlora (a bare mirror or a clone). Files are
read with `git show COMMIT:PATH`; only the standard library is used; the output is
byte-for-byte reproducible.

What it reads: eval/prompts/oa_questions.jsonl (the QLoRA paper's "OA benchmark": 953
conversations of the OASST1 validation split, `text` a `### Human: ... ### Assistant:`
dialogue ending on the human turn to answer) and GPT-4's three-class reviews of gpt-4's
answer against gpt-3.5-turbo's, once in each order:
eval/ratings-gpt4/oa/gpt-4-oa-generations-vs-gpt-3.5-oa-generations-gpt-4-reviewer-
threeclass.jsonl and the swapped gpt-3.5-...-vs-gpt-4-... file. `score` 1 = Assistant 1
better, 2 = Assistant 2 better, 3 = a tie, -1 = the review could not be parsed (left out,
as QLoRA leaves it out). Reviews join prompts on `message_id` == `question_id`.

Each output row: `id` (`oa_qlora-<question_id>`), `benchmark` and `source` ("oa_qlora"),
`prompt` (the last human turn, stripped: what a router scores), `turns` (every human
turn, in order), `lang` (OASST's language code), `verdicts` ({"gpt-4 first": v,
"gpt-3.5 first": v}, v = 1 if gpt-4's answer won, 0.5 a tie, 0 if gpt-3.5's won, null if
unparsed), `strong_model` gpt-4, `weak_model` gpt-3.5-turbo, `strong_quality` = the mean
of the valid verdicts (0, 0.25, 0.5, 0.75 or 1) and `weak_quality` = 1 - strong_quality.
Prompts with no valid verdict are dropped, and so are prompts whose whitespace-normalised,
casefolded text equals a prompt of the other data/routing sets (AlpacaEval's "oasst"
collection comes from OpenAssistant too; --sets is the folder holding mmlu, gsm8k,
mt_bench and alpaca_eval .jsonl) or of an earlier row here.
"""

import argparse
import json
import os
import re
import subprocess

DEFAULT_COMMIT = "7f4e95a68dc076bea9b3a413d2b512eca6d004e5"
QUESTIONS = "eval/prompts/oa_questions.jsonl"
RATINGS = (
    "eval/ratings-gpt4/oa/{}-oa-generations-vs-{}-oa-generations-gpt-4-reviewer-threeclass.jsonl"
)
STRONG = "gpt-4"
WEAK = "gpt-3.5-turbo"
# (order name, Assistant 1's file name, Assistant 2's file name, gpt-4 is Assistant 1)
ORDERS = (
    ("gpt-4 first", "gpt-4", "gpt-3.5", True),
    ("gpt-3.5 first", "gpt-3.5", "gpt-4", False),
)
# the shipped sets a new prompt must not repeat (files in --sets, by default this folder)
OTHER_SETS = ("mmlu.jsonl", "gsm8k.jsonl", "mt_bench.jsonl", "alpaca_eval.jsonl")
MARKER = re.compile(r"(### Human:|### Assistant:)")


def git_show(repo, commit, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True
    ).stdout.decode("utf-8")


def normalised(text):
    return " ".join(text.split()).casefold()


def human_turns(text):
    """The human turns of a `### Human: ... ### Assistant: ...` dialogue, stripped."""
    parts = MARKER.split(text)
    markers = parts[1::2]
    if parts[0].strip() or parts[-1].strip():
        raise ValueError(f"text outside the turns: {text[:80]!r}")
    if markers != ["### Human:", "### Assistant:"] * (len(markers) // 2) or not markers:
        raise ValueError(f"turns do not alternate: {text[:80]!r}")
    return [parts[i].strip() for i in range(2, len(parts), 4)]


def verdict(score, strong_first):
    """gpt-4's result in one review: 1 won, 0.5 tie, 0 lost; None if unparsed."""
    if score == -1:
        return None
    if score == 3:
        return 0.5
    if score not in (1, 2):
        raise ValueError(f"unexpected score {score!r}")
    return 1.0 if (score == 1) == strong_first else 0.0


def other_prompts(directory):
    seen = set()
    for name in OTHER_SETS:
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    seen.add(normalised(json.loads(line)["prompt"]))
    return seen


def build(repo, commit, seen):
    """The rows, and counts of what was dropped: (rows, {reason: count})."""
    questions = [json.loads(line) for line in git_show(repo, commit, QUESTIONS).splitlines()]
    reviews = {}
    for name, first, second, strong_first in ORDERS:
        path = RATINGS.format(first, second)
        by_id = {}
        for line in git_show(repo, commit, path).splitlines():
            item = json.loads(line)
            if item["message_id"] in by_id:
                raise ValueError(f"{path}: {item['message_id']} reviewed twice")
            by_id[item["message_id"]] = verdict(item["score"], strong_first)
        if len(by_id) != len(questions):
            raise ValueError(f"{path}: {len(by_id)} reviews for {len(questions)} prompts")
        reviews[name] = by_id
    own = set()
    dropped = {"no valid verdict": 0, "repeats another set": 0, "repeats an earlier row": 0}
    out = []
    for question in questions:
        key = question["question_id"]
        verdicts = {name: reviews[name][key] for name, _, _, _ in ORDERS}
        valid = [v for v in verdicts.values() if v is not None]
        if not valid:
            dropped["no valid verdict"] += 1
            continue
        turns = human_turns(question["text"])
        prompt = turns[-1]
        norm = normalised(prompt)
        if norm in seen:
            dropped["repeats another set"] += 1
            continue
        if norm in own:
            dropped["repeats an earlier row"] += 1
            continue
        own.add(norm)
        strong = sum(valid) / len(valid)
        out.append(
            {
                "id": f"oa_qlora-{key}",
                "benchmark": "oa_qlora",
                "source": "oa_qlora",
                "prompt": prompt,
                "strong_model": STRONG,
                "weak_model": WEAK,
                "strong_quality": strong,
                "weak_quality": 1.0 - strong,
                "turns": turns,
                "lang": question["lang"],
                "verdicts": verdicts,
            }
        )
    return out, dropped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--out", default="oa_qlora.jsonl")
    parser.add_argument("--sets", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    seen = other_prompts(args.sets)
    rows, dropped = build(args.repo, args.commit, seen)
    with open(args.out, "w", encoding="ascii", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=True, sort_keys=False) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}; dropped {dropped}")


if __name__ == "__main__":
    main()
