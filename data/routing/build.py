#!/usr/bin/env python3
# copied from shared/data/routing, then formatted by `ruff format` (layout only)
"""Rebuild the routing training data in this folder from lm-sys/RouteLLM.

Usage:
    python3 build.py REPO [--commit SHA] [--out DIR]

REPO is a git directory of github.com/lm-sys/RouteLLM (a bare mirror or a
clone). Files are read with `git show COMMIT:PATH`, so no checkout is needed.
Only the standard library is used. Output is byte-for-byte reproducible.

What it does (mirrors routellm/evals/benchmarks.py, which is how RouteLLM
itself evaluates routers on these files):
  * MMLU: concatenates routellm/evals/mmlu/responses/mmlu_<domain>.csv for the
    57 domains in routellm/evals/mmlu/domains.py (in that order), keeps the
    `prompt` column verbatim (question + "A. ..".."D. .." + "Answer:") and the
    per-model True/False columns; drops rows whose prompt is an `eval_prompt`
    in mmlu/contaminated_prompts.jsonl.
  * GSM8K: routellm/evals/gsm8k/gsm8k_responses.csv, `prompt` verbatim (the
    bare test question), True/False per model; drops contaminated prompts.
  * MT-Bench: mt_bench/question.jsonl + mt_bench/judgements.jsonl (GPT-4
    single-answer grades, 1-10, per turn). prompt = turn 1 (RouteLLM routes on
    the first turn only); score = mean of the two turn grades (what RouteLLM's
    MTBench benchmark averages); a question is dropped if either turn is in
    mt_bench/contaminated_prompts.jsonl.
"""

import argparse
import ast
import csv
import io
import json
import os
import subprocess
import sys

STRONG = "gpt-4-1106-preview"
WEAK = "mistralai/Mixtral-8x7B-Instruct-v0.1"
DEFAULT_COMMIT = "0b64fdafe049e596a3f5657c219329f24af24198"
EVALS = "routellm/evals"

csv.field_size_limit(sys.maxsize)


def git_show(repo, commit, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8")


def read_jsonl(text):
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def contaminated(repo, commit, bench):
    rows = read_jsonl(git_show(repo, commit, f"{EVALS}/{bench}/contaminated_prompts.jsonl"))
    return {r["eval_prompt"] for r in rows}


def to_bool(v):
    if v not in ("True", "False"):
        raise ValueError(f"unexpected label {v!r}")
    return v == "True"


def mmlu_domains(repo, commit):
    # domains.py is a single list literal; parse it as data, never execute it
    tree = ast.parse(git_show(repo, commit, f"{EVALS}/mmlu/domains.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "ALL_MMLU_DOMAINS":
            return ast.literal_eval(node.value)
    raise ValueError("ALL_MMLU_DOMAINS not found")


def build_mmlu(repo, commit):
    bad = contaminated(repo, commit, "mmlu")
    out, total, dropped = [], 0, 0
    for domain in mmlu_domains(repo, commit):
        text = git_show(repo, commit, f"{EVALS}/mmlu/responses/mmlu_{domain}.csv")
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        for i, r in enumerate(rows):
            total += 1
            if r["prompt"] in bad:
                dropped += 1
                continue
            out.append(
                {
                    "id": f"mmlu-{domain}-{i:04d}",
                    "benchmark": "mmlu",
                    "subject": domain,
                    "prompt": r["prompt"],
                    "strong_correct": to_bool(r[STRONG]),
                    "weak_correct": to_bool(r[WEAK]),
                    "strong_model": STRONG,
                    "weak_model": WEAK,
                }
            )
    return out, total, dropped


def build_gsm8k(repo, commit):
    bad = contaminated(repo, commit, "gsm8k")
    text = git_show(repo, commit, f"{EVALS}/gsm8k/gsm8k_responses.csv")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    out, dropped = [], 0
    for i, r in enumerate(rows):
        if r["prompt"] in bad:
            dropped += 1
            continue
        out.append(
            {
                "id": f"gsm8k-{i:04d}",
                "benchmark": "gsm8k",
                "prompt": r["prompt"],
                "strong_correct": to_bool(r[STRONG]),
                "weak_correct": to_bool(r[WEAK]),
                "strong_model": STRONG,
                "weak_model": WEAK,
            }
        )
    return out, len(rows), dropped


def build_mt_bench(repo, commit):
    bad = contaminated(repo, commit, "mt_bench")
    questions = read_jsonl(git_show(repo, commit, f"{EVALS}/mt_bench/question.jsonl"))
    judgements = read_jsonl(git_show(repo, commit, f"{EVALS}/mt_bench/judgements.jsonl"))
    grade = {}
    for j in judgements:
        key = (j["question_id"], j["model"], j["turn"])
        if key in grade:
            raise ValueError(f"duplicate judgement {key}")
        grade[key] = float(j["score"])
    out, dropped = [], 0
    for q in questions:
        t1, t2 = q["turns"][0], q["turns"][1]
        if t1 in bad or t2 in bad:
            dropped += 1
            continue
        qid = q["question_id"]
        s = [grade[(qid, STRONG, 1)], grade[(qid, STRONG, 2)]]
        w = [grade[(qid, WEAK, 1)], grade[(qid, WEAK, 2)]]
        out.append(
            {
                "id": f"mt_bench-{qid}",
                "benchmark": "mt_bench",
                "category": q["category"],
                "prompt": t1,
                "turns": q["turns"],
                "strong_score": (s[0] + s[1]) / 2,
                "weak_score": (w[0] + w[1]) / 2,
                "strong_turn_scores": s,
                "weak_turn_scores": w,
                "strong_model": STRONG,
                "weak_model": WEAK,
            }
        )
    return out, len(questions), dropped


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=True) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repo", help="git dir of lm-sys/RouteLLM")
    ap.add_argument("--commit", default=DEFAULT_COMMIT)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    for name, fn in (("mmlu", build_mmlu), ("gsm8k", build_gsm8k), ("mt_bench", build_mt_bench)):
        rows, total, dropped = fn(a.repo, a.commit)
        write_jsonl(os.path.join(a.out, f"{name}.jsonl"), rows)
        print(
            f"{name}: {len(rows)} rows written ({total} in source, {dropped} contaminated dropped)"
        )
    lic = subprocess.run(
        ["git", "-C", a.repo, "show", f"{a.commit}:LICENSE"], check=True, capture_output=True
    ).stdout
    with open(os.path.join(a.out, "LICENSE"), "wb") as f:
        f.write(lic)


if __name__ == "__main__":
    main()
