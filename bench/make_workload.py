"""Write `bench/workloads/mixed.jsonl`, the routing benchmark's workload, deterministically.

    .venv/bin/python bench/make_workload.py

One line per request: `{"class", "request", "output_tokens", "pad_tokens"}`. `request` is
an OpenAI chat completion body; `output_tokens` is how long the answer is assumed to be
(what the request is billed for); `pad_tokens`, when present, is a document of about
that many tokens that `bench/routing.py` appends to the last user message at load time
(so the file stays small while the workload still has 30k- and 130k-token prompts).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "workloads" / "mixed.jsonl"
SEED = 20260101
USERS = 40

GENERAL = [
    "Explain the difference between TCP and UDP for a new engineer.",
    "Draft a polite email asking a vendor to move our meeting to Thursday.",
    "What are good questions to ask in a product-manager interview?",
    "Summarize the main causes of the French Revolution in five bullet points.",
    "Suggest a name for an internal tool that tracks cloud spend.",
    "How do I explain eventual consistency to a sales team?",
    "Translate this sentence into German: the shipment leaves on Monday.",
    "Give me three ideas for a team offsite in the spring.",
    "What is the difference between a Roth IRA and a traditional IRA?",
    "Rewrite this paragraph to sound more confident: we think the launch may go well.",
]
CODE = [
    "Refactor this Python code so it streams the file instead of reading it whole:\n"
    "```python\ndef load(path):\n    return open(path).read().splitlines()\n```",
    "Why does this raise a KeyError? Traceback (most recent call last): ...",
    "Write unit tests for a function that parses ISO-8601 durations.",
    "Port this class to TypeScript:\n```python\nclass Counter:\n    def __init__(self):\n"
    "        self.n = 0\n```",
    "Fix the compile error in this Go snippet:\n```go\nfunc main() { x := 1 }\n```",
]
MATH = [
    "Solve for x: 3x^2 - 12x + 9 = 0, and show each step.",
    "Prove that the square root of 2 is irrational.",
    "Compute the integral of x * e^x from 0 to 1.",
    "What is the probability that two dice sum to 9?",
]
EXTRACTION = [
    "Extract the invoice number, total and due date from this invoice as JSON.",
    "Return the people and companies mentioned in this article as JSON.",
    "Pull every date and amount out of this contract clause as JSON.",
]
AGENT = [
    "Book a table for four at an Italian place near the office tomorrow at 7pm.",
    "Look up the open incidents for the payments service and summarize them.",
    "Create a ticket for the flaky login test and assign it to the on-call.",
]
FILLER_WORDS = ("the", "report", "shows", "revenue", "growth", "while", "costs", "stayed", "flat")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search internal systems",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_ticket",
            "description": "Open a ticket",
            "parameters": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "assignee": {"type": "string"}},
            },
        },
    },
]


def document(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(FILLER_WORDS) for _ in range(words))


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def make(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    user = f"user-{rng.randrange(USERS)}"
    system = {"role": "system", "content": "You are a helpful assistant for Acme Corp."}
    request: dict[str, Any] = {"model": "auto", "user": user}
    line: dict[str, Any] = {}
    if roll < 0.34:
        kind = "general"
        prompt = rng.choice(GENERAL)
        request["messages"] = [system, user_message(prompt)]
        output = rng.randint(80, 600)
    elif roll < 0.54:
        kind = "code"
        prompt = rng.choice(CODE) + "\n" + document(rng, rng.randint(20, 300))
        request["messages"] = [system, user_message(prompt)]
        output = rng.randint(200, 1200)
    elif roll < 0.62:
        kind = "math"
        request["messages"] = [system, user_message(rng.choice(MATH))]
        output = rng.randint(250, 900)
    elif roll < 0.74:
        kind = "extraction"
        request["messages"] = [system, user_message(rng.choice(EXTRACTION))]
        line["pad_tokens"] = rng.randint(300, 3000)
        if rng.random() < 0.5:
            request["response_format"] = {"type": "json_object"}
        else:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "fields", "schema": {"type": "object"}},
            }
        output = rng.randint(40, 300)
    elif roll < 0.86:
        kind = "tools"
        request["messages"] = [system, user_message(rng.choice(AGENT))]
        request["tools"] = TOOLS
        output = rng.randint(30, 250)
    elif roll < 0.91:
        kind = "vision"
        request["messages"] = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is wrong in this dashboard screenshot?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/s.png"}},
                ],
            }
        ]
        output = rng.randint(100, 400)
    else:
        kind = "long-document"
        pad = 130_000 if rng.random() < 0.12 else rng.randint(12_000, 40_000)
        request["messages"] = [system, user_message("Summarize this document for an executive:")]
        line["pad_tokens"] = pad
        output = rng.randint(300, 800)
    if rng.random() < 0.3:
        request["max_tokens"] = rng.choice([256, 512, 1024, 2048])
        output = min(output, request["max_tokens"])
    return {"class": kind, "request": request, "output_tokens": output, **line}


def main() -> None:
    rng = random.Random(SEED)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as out:
        for _ in range(400):
            out.write(json.dumps(make(rng), separators=(",", ":")) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
