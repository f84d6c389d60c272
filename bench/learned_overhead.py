"""What learned routing costs on the hot path, beside the rule-based `auto` route.

    .venv/bin/python bench/learned_overhead.py [--requests 2000]

In one process and one run, for the same ~2 KB request (bench/overhead.py's system
prompt and user message, the user message different every time):

- scorer alone: CPU per prompt of each feature-set candidate (hashed word unigrams;
  unigrams+bigrams, the shipped default; plus character trigrams), pure Python;
- plan `auto`: features + the pure planner, as the gateway's plan stage runs it;
- scorers alone on the 2 KB prompt: `ngram-v1` (n-grams), `chat-words-v1` (a word
  table) and `ngram-chat-v1` (both, behind two gates: what `auto-learned` ships);
- plan `auto-learned`: the same plus LearnedScoring.attach (the decision, the hop to the
  worker thread, the gated score) before the planner; `auto-chat` the same on the table;
- plan `auto-multi`: the same on the multi-model route (`choice: cheapest_above`): the
  score plus one quality head per model (a sigmoid each) and the cheapest-above order;
- batched `gateway route score` path: score_many over the whole set.

CPU is process CPU (`time.process_time`: the worker thread's included), per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.overhead import SYSTEM, USER
from gateway.pipeline.learned_scoring import LearnedScoring
from gateway.routing.features import extract_features
from gateway.routing.learned.text_features import FeatureSpec, featurize
from gateway.routing.learned.weights import load_scorer
from gateway.routing.policy_engine import plan
from gateway.routing.state import LiveStats, TenantState
from gateway.settings.loader import load_policy
from gateway.tokens import count_text
from gateway.wire.openai import ChatRequest, Message

ROOT = Path(__file__).resolve().parent.parent
POLICIES = (ROOT / "policies" / "models.yaml", ROOT / "policies" / "routes.yaml")
NOON = datetime(2026, 1, 1, 12, tzinfo=UTC)


def requests(model: str, count: int) -> list[ChatRequest]:
    return [
        ChatRequest(
            model=model,
            messages=[
                Message(role="system", content=SYSTEM),
                Message(role="user", content=USER.replace("@@@@@@@@", f"{i:08d}")),
            ],
            max_tokens=64,
        )
        for i in range(count)
    ]


def per_request_us(fn: object, count: int) -> tuple[float, float]:
    """(CPU us, wall us) per request of calling fn() once."""
    assert callable(fn)
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return (
        (time.process_time() - cpu) / count * 1e6,
        (time.perf_counter() - wall) / count * 1e6,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is shown")
    args = parser.parse_args(argv)
    problems: list[str] = []
    policy = load_policy(POLICIES, os.environ, problems)
    if policy is None:
        print("\n".join(problems), file=sys.stderr)
        return 1
    n = args.requests
    auto = requests("auto", n)
    learned = requests("auto-learned", n)
    multi = requests("auto-multi", n)
    chat = requests("auto-chat", n)
    texts = [r.messages[-1].text() for r in learned]
    prompt_bytes = len((SYSTEM + USER).encode())
    scorer = load_scorer("ngram-v1")
    words_scorer = load_scorer("chat-words-v1")
    gated_scorer = load_scorer("ngram-chat-v1")
    scoring = LearnedScoring(max_pending=10 * n)
    scoring.load(policy)

    def featurizer(spec: FeatureSpec) -> object:
        # the whole 2 KB (system + user), the worst case for a scorer reading everything
        whole = [SYSTEM + "\n" + t for t in texts]
        return lambda: [featurize(t, spec) for t in whole]

    def plan_auto() -> None:
        for r in auto:
            features = extract_features(r, {}, tenant=None, key_id=None, seed=1)
            plan(features, policy, TenantState(), LiveStats(), NOON)

    async def plan_scored_async(scored: list[ChatRequest]) -> None:
        # through the scoring stage: on a learned route the pool trip and the score; on
        # `auto` what every request pays once the policy has a learned route, the check
        # that it is not going to one
        for r in scored:
            features = extract_features(r, {}, tenant=None, key_id=None, seed=1)
            features = await scoring.attach(features, r, policy, TenantState(), NOON)
            plan(features, policy, TenantState(), LiveStats(), NOON)

    cases = {
        "featurize: word 1-grams": featurizer(FeatureSpec(word_ngrams=1)),
        "featurize: word 1+2-grams (shipped)": featurizer(FeatureSpec()),
        "featurize: word 1+2 + char 3-grams": featurizer(FeatureSpec(char_ngrams=(3,))),
        "score: ngram-v1, 2 KB prompt": lambda: [scorer.score(SYSTEM + "\n" + t) for t in texts],
        "score: chat-words-v1, 2 KB prompt": lambda: [
            words_scorer.score(SYSTEM + "\n" + t) for t in texts
        ],
        "score: ngram-chat-v1 (gated), 2 KB prompt": lambda: [
            gated_scorer.score(SYSTEM + "\n" + t) for t in texts
        ],
        "score_many (route score), user msg": lambda: scorer.score_many(texts),
        "plan auto": plan_auto,
        "plan auto, through the scoring check": lambda: asyncio.run(plan_scored_async(auto)),
        "plan auto-learned (pool + ngram-chat-v1)": lambda: asyncio.run(plan_scored_async(learned)),
        "plan auto-chat (pool + chat-words-v1)": lambda: asyncio.run(plan_scored_async(chat)),
        "plan auto-multi (+ quality heads)": lambda: asyncio.run(plan_scored_async(multi)),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    # the tokenizer loads on first use (~0.5 s), the thread pool starts on first score
    count_text("warm up")
    asyncio.run(scoring.attach(
        extract_features(learned[0], {}, tenant=None, key_id=None, seed=1),
        learned[0], policy, TenantState(), NOON,
    ))  # fmt: skip
    for _ in range(args.repeat):
        for name, fn in cases.items():
            results[name].append(per_request_us(fn, n))
    scoring.close()
    print(f"{n} requests of {prompt_bytes} bytes, median of {args.repeat} runs, one process")
    width = max(len(name) for name in cases)
    print(f"{'case'.ljust(width)}  CPU us/req  wall us/req")
    for name, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"{name.ljust(width)}  {cpu:10.1f}  {wall:11.1f}")
    delta = statistics.median(r[0] for r in results["plan auto-learned (pool + ngram-chat-v1)"])
    delta -= statistics.median(r[0] for r in results["plan auto"])
    print(f"\nauto-learned costs {delta:.0f} us of CPU per request more than auto")
    chat_delta = statistics.median(r[0] for r in results["plan auto-chat (pool + chat-words-v1)"])
    chat_delta -= statistics.median(r[0] for r in results["plan auto"])
    print(f"auto-chat costs {chat_delta:.0f} us of CPU per request more than auto")
    multi_delta = statistics.median(r[0] for r in results["plan auto-multi (+ quality heads)"])
    multi_delta -= statistics.median(r[0] for r in results["plan auto"])
    print(f"auto-multi (ngram-v1 and its quality heads) costs {multi_delta:.0f} us more than auto")
    return 0


if __name__ == "__main__":
    sys.exit(main())
