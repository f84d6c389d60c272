#!/usr/bin/env python3
"""Rebuild data/routing/hellobench.jsonl (long-generation prompts with a GPT-4o checklist
judge's per-prompt score for every model HelloBench evaluated) from Quehry/HelloBench.

Usage:
    python3 build_hellobench.py REPO [--commit SHA] [--out FILE] [--sets DIR]

REPO is a git directory of github.com/Quehry/HelloBench (a bare mirror or a clone). Files
are read with `git show COMMIT:PATH`; only the standard library is used; the repository's
code is never run (the checklist weights are parsed as data); the output is byte-for-byte
reproducible.

What it reads: for every model directory of results/judgements/main_exp/ and every task
(open_ended_qa, summarization, chat, text_completion, heuristic_text_generation),
<model>/<task>_results.jsonl: HelloEval's judge (gpt-4o-2024-08-06) scoring the model's
answer against the prompt's checklist, each item 0, 0.25, 0.5, 0.75 or 1. A prompt's
score is HelloBench's own: the sum of item score * weight, with the weights of the
prompt's category in WEIGHT_DICT of results/scripts/compute.py (each category's weights
sum to 100, so the score is 0-100; here it is divided by 100 and rounded to 6 places).
As in compute.py, a repeated id keeps its first record, and a record whose item count
differs from its category's weights, or with an item score that is not a number in [0, 1],
has no score (null). Categories come from data/main_data/<task>.jsonl; that file is not
in the snapshot for summarization, whose instructions use one of five fixed templates,
each naming one of the five categories of checklists/summarization_checklist.json
(TEMPLATES below; a summarization instruction matching none or two stops the build).

Each output row: `id` (`hellobench-<HelloBench id>`), `benchmark` ("hellobench"),
`source` ("hellobench_" + task), `prompt` (the instruction, verbatim), `category`,
`judged` (model -> its score in [0, 1], null where missing or unparseable) and the
two-tier pair `strong_model` gpt4o_0806, `weak_model` llama31_8b with `strong_quality` /
`weak_quality` = their scores. Rows follow the task order above and, within a task, the
strong model's judgement file. Prompts either of the two lacks a score for are dropped,
and so are prompts whose whitespace-normalised, casefolded text equals a prompt of the
other data/routing sets (--sets, by default this folder) or of an earlier row.
"""

import argparse
import ast
import json
import os
import re
import subprocess

DEFAULT_COMMIT = "d403282968b0a61a4963a73c631d3fc1318f17d7"
TASKS = ("open_ended_qa", "summarization", "chat", "text_completion", "heuristic_text_generation")
JUDGEMENTS = "results/judgements/main_exp"
STRONG = "gpt4o_0806"
WEAK = "llama31_8b"
# summarization's data file is absent: its instruction template names the category
TEMPLATES = {
    "Summarize the following academic article": "academic_article",
    "Summarize the following blog article": "blogs",
    "Summarize the following dialog": "long_dialogue",
    "Summarize the following news": "news",
    "Summarize the following report": "report",
}
OTHER_SETS = ("mmlu.jsonl", "gsm8k.jsonl", "mt_bench.jsonl", "alpaca_eval.jsonl", "oa_qlora.jsonl")


def git_show(repo, commit, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True
    ).stdout.decode("utf-8")


def git_dirs(repo, commit, path):
    listing = subprocess.run(
        ["git", "-C", repo, "ls-tree", f"{commit}:{path}"], check=True, capture_output=True
    ).stdout.decode("utf-8")
    return [line.split("\t", 1)[1] for line in listing.splitlines() if line.split()[1] == "tree"]


def normalised(text):
    return " ".join(text.split()).casefold()


def weight_dict(repo, commit):
    """WEIGHT_DICT of compute.py, parsed as a literal (category -> checklist weights)."""
    source = git_show(repo, commit, "results/scripts/compute.py")
    match = re.search(r"^WEIGHT_DICT = (\{.*?^\})", source, re.S | re.M)
    return ast.literal_eval(match.group(1))


def summarization_category(instruction):
    found = [category for template, category in TEMPLATES.items() if template in instruction]
    if len(found) != 1:
        raise ValueError(f"summarization instruction matches {found}: {instruction[:80]!r}")
    return found[0]


def score(evaluation, weights):
    """compute.py's per-prompt score / 100, or None where compute.py skips the record."""
    if not isinstance(evaluation, list) or len(evaluation) != len(weights):
        return None
    items = []
    for item in evaluation:
        try:
            value = float(item["evaluation_score"])
        except (KeyError, TypeError, ValueError):
            return None
        if not 0 <= value <= 1:
            return None
        items.append(value)
    return round(sum(value * weight for value, weight in zip(items, weights, strict=True)) / 100, 6)


def build(repo, commit, seen):
    """The rows and counts of what was dropped: (rows, {reason: count})."""
    weights = weight_dict(repo, commit)
    models = git_dirs(repo, commit, JUDGEMENTS)
    if STRONG not in models or WEAK not in models:
        raise ValueError(f"{STRONG} or {WEAK} not among {models}")
    dropped = {"strong or weak unscored": 0, "repeats another set": 0, "repeats an earlier row": 0}
    own = set()
    out = []
    for task in TASKS:
        categories = {}
        if task != "summarization":
            for line in git_show(repo, commit, f"data/main_data/{task}.jsonl").splitlines():
                item = json.loads(line)
                categories[item["id"]] = (item["category"], item["instruction"])
        order = []
        instructions = {}
        judged = {}
        category_of = {}
        for model in models:
            path = f"{JUDGEMENTS}/{model}/{task}_results.jsonl"
            for line in git_show(repo, commit, path).splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key = item["id"]
                if model == STRONG and STRONG not in judged.get(key, {}):
                    order.append(key)
                if key not in instructions:
                    instructions[key] = item["instruction"]
                elif instructions[key] != item["instruction"]:
                    raise ValueError(f"{path}: {key} has another instruction")
                scores = judged.setdefault(key, {})
                if model in scores:
                    continue  # compute.py keeps an id's first record
                if task == "summarization":
                    category = summarization_category(item["instruction"])
                else:
                    category, instruction = categories[key]
                    if instruction != item["instruction"]:
                        raise ValueError(f"{path}: {key} differs from data/main_data")
                category_of[key] = category
                scores[model] = score(item["checklist_wise_evaluation"], weights[category])
        if task != "summarization" and set(categories) != set(judged):
            raise ValueError(f"{task}: judged ids differ from data/main_data")
        for key in order:
            scores = {model: judged[key].get(model) for model in models}
            if scores[STRONG] is None or scores[WEAK] is None:
                dropped["strong or weak unscored"] += 1
                continue
            prompt = instructions[key]
            norm = normalised(prompt)
            if norm in seen:
                dropped["repeats another set"] += 1
                continue
            if norm in own:
                dropped["repeats an earlier row"] += 1
                continue
            own.add(norm)
            category = category_of[key]
            out.append(
                {
                    "id": f"hellobench-{key}",
                    "benchmark": "hellobench",
                    "source": f"hellobench_{task}",
                    "prompt": prompt,
                    "strong_model": STRONG,
                    "weak_model": WEAK,
                    "strong_quality": scores[STRONG],
                    "weak_quality": scores[WEAK],
                    "category": category,
                    "judged": scores,
                }
            )
    return out, dropped


def other_prompts(directory):
    seen = set()
    for name in OTHER_SETS:
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    seen.add(normalised(json.loads(line)["prompt"]))
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--out", default="hellobench.jsonl")
    parser.add_argument("--sets", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    rows, dropped = build(args.repo, args.commit, other_prompts(args.sets))
    with open(args.out, "w", encoding="ascii", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=True, sort_keys=False) + "\n")
    sources = {}
    for row in rows:
        sources[row["source"]] = sources.get(row["source"], 0) + 1
    print(f"wrote {len(rows)} rows to {args.out}: {sources}; dropped {dropped}")


if __name__ == "__main__":
    main()
