"""The cost-quality curve of the learned strategy's multi-model choice (`choice:
cheapest_above`) beside the two-tier one, on chat prompts held out by source.

    .venv/bin/python bench/multi_model_curve.py      # ~5 s: numpy, the shipped scorer

Two sets, each judging several models on the same prompts (data/routing/README.md):

- AlpacaEval: 805 chat prompts from five collections, a GPT-4-Turbo judge's verdict on
  eleven models' answers against GPT-4 Turbo's own; quality is the share of prompts on
  which the serving model beat GPT-4 Turbo (heads: judged-v1's recipe);
- HelloBench: 647 long-generation prompts from five tasks, a GPT-4o judge's checklist
  score (0-1) of 23 models' answers; quality is the serving model's mean score (heads:
  judged-v2's recipe).

The catalog's four families, each set's nearest judged stand-in, and the catalog's list
output price ($/M tokens):

    family             AlpacaEval                HelloBench          price
    GPT-4.1            gpt4 (GPT-4-0613)         gpt4o_0806           8.00
    Claude Sonnet 4.5  claude-2.1                claude35            15.00
    Gemini 2.5 Flash   gemini-pro                gemini15_pro         2.50
    DeepSeek V3.2      Mixtral-8x7B-Instruct     deepseek_chat_api    0.42

Held out by source, as bench/chat_holdout.py holds chat out: for each collection (task)
the quality heads are fitted (bench/train_quality.py's recipe) on the set's other
sources and predict the left-out one. The score the heads read is the shipped
ngram-v1's, which was trained on MMLU, GSM8K and MT-Bench only, so no prompt here was
ever its training data.

Multi-model: per prompt, the cheapest family whose predicted quality reaches the
target, else the one predicted best (the strategy's order). Swept over the target.
Two-tier: the shipped route's tiers ([GPT-4.1, Claude] strong, [DeepSeek, Gemini]
cheap, the cheapest of the tier serving), the score against a threshold, swept over the
strong share. "base rates only" is the multi-model choice with every head's slope set to
0 (each family predicted by its overall quality): the difference between it and the
full heads is what the per-prompt score adds.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chat_holdout import ALPACA_COLLECTIONS, HELLOBENCH_TASKS
from bench.train_quality import CHAT_FILE, ROOT, fit_heads, load_chat, shipped_scores
from gateway.routing.learned.quality import QualityHead
from gateway.training.fitting import score_logits

Family = tuple[str, str, float]
# family, judged stand-in, $/M output tokens (policies/models.yaml list prices)
FAMILIES: tuple[Family, ...] = (
    ("deepseek-v3.2", "Mixtral-8x7B-Instruct-v0.1", 0.42),
    ("gemini-2.5-flash", "gemini-pro", 2.50),
    ("gpt-4.1", "gpt4", 8.00),
    ("claude-sonnet-4.5", "claude-2.1", 15.00),
)
TWO_TIER = ("deepseek-v3.2", "gpt-4.1")  # the cheapest of each shipped tier


@dataclass(frozen=True)
class ChatSet:
    name: str
    path: Path
    sources: tuple[str, ...]
    families: tuple[Family, ...]
    quality: str


CHAT_SETS = (
    ChatSet(
        "AlpacaEval",
        CHAT_FILE,
        ALPACA_COLLECTIONS,
        FAMILIES,
        "share of prompts the serving model beat GPT-4 Turbo (GPT-4-Turbo judge)",
    ),
    ChatSet(
        "HelloBench",
        ROOT / "data" / "routing" / "hellobench.jsonl",
        HELLOBENCH_TASKS,
        (
            ("deepseek-v3.2", "deepseek_chat_api", 0.42),
            ("gemini-2.5-flash", "gemini15_pro", 2.50),
            ("gpt-4.1", "gpt4o_0806", 8.00),
            ("claude-sonnet-4.5", "claude35", 15.00),
        ),
        "mean checklist score of the serving model's answer (GPT-4o judge, 0-1)",
    ),
)


@dataclass(frozen=True)
class Point:
    knob: str
    cost: float
    quality: float
    shares: tuple[float, ...]  # per family, in the set's families order


def held_out_predictions(
    chat: ChatSet,
    items: Sequence[dict[str, object]],
    scores: npt.NDArray[np.float64],
    *,
    base_rates_only: bool = False,
) -> npt.NDArray[np.float64]:
    """prompts x families: each prompt's predicted quality from heads fitted on the other
    sources."""
    sources = np.asarray([str(item["source"]) for item in items])
    x = score_logits(scores)
    out = np.zeros((len(items), len(chat.families)))
    judged = [stand_in for _, stand_in, _ in chat.families]
    for source in chat.sources:
        train = np.flatnonzero(sources != source).astype(np.int64)
        test = np.flatnonzero(sources == source)
        heads = fit_heads(scores, items, train, judged)
        for column, name in enumerate(judged):
            head = heads[name]
            if base_rates_only:
                head = QualityHead(head.bias, 0.0)
            out[test, column] = 1 / (1 + np.exp(-(head.bias + head.slope * x[test])))
    return out


def cheapest_above(predicted: npt.NDArray[np.float64], target: float) -> npt.NDArray[np.int64]:
    """Per prompt, the family served: the cheapest (families are in price order) whose
    prediction reaches the target, else the best predicted."""
    clears = predicted >= target
    first_clearing = np.argmax(clears, axis=1)
    best = np.argmax(predicted, axis=1)
    return np.where(clears.any(axis=1), first_clearing, best).astype(np.int64)


def summarise(
    chat: ChatSet, knob: str, chosen: npt.NDArray[np.int64], truth: npt.NDArray[np.float64]
) -> Point:
    prices = np.asarray([price for _, _, price in chat.families])
    rows = np.arange(len(chosen))
    shares = tuple(float((chosen == f).mean()) for f in range(len(chat.families)))
    return Point(knob, float(prices[chosen].mean()), float(truth[rows, chosen].mean()), shares)


def two_tier_curve(
    chat: ChatSet, scores: npt.NDArray[np.float64], truth: npt.NDArray[np.float64]
) -> list[Point]:
    cheap, strong = (next(i for i, f in enumerate(chat.families) if f[0] == n) for n in TWO_TIER)
    order = np.argsort(-scores, kind="stable")
    points = []
    for share in np.linspace(0, 1, 11):
        chosen = np.full(len(scores), cheap, dtype=np.int64)
        chosen[order[: round(share * len(scores))]] = strong
        points.append(summarise(chat, f"strong {share:.0%}", chosen, truth))
    return points


def multi_curve(
    chat: ChatSet, predicted: npt.NDArray[np.float64], truth: npt.NDArray[np.float64]
) -> list[Point]:
    # every distinct prediction is a place the choice changes; a dozen evenly spaced
    # quantiles of them, plus both ends, trace the curve
    targets = np.unique(np.quantile(predicted, np.linspace(0, 1, 25)))
    return [
        summarise(chat, f"target {t:.4f}", cheapest_above(predicted, t), truth) for t in targets
    ]


def at_cost(curve: Sequence[Point], cost: float) -> float:
    """The two-tier curve's quality at this mean cost (linear between its points)."""
    costs = np.asarray([p.cost for p in curve])
    qualities = np.asarray([p.quality for p in curve])
    order = np.argsort(costs)
    return float(np.interp(cost, costs[order], qualities[order]))


def render(
    chat: ChatSet, title: str, points: Sequence[Point], beside: Sequence[Point] | None
) -> str:
    head = ["", "$/M out", "quality", *(name for name, _, _ in chat.families)]
    if beside is not None:
        head.append("two-tier at same $")
    cells = [head]
    for p in points:
        row = [p.knob, f"{p.cost:.2f}", f"{p.quality:.4f}", *(f"{s:.0%}" for s in p.shares)]
        if beside is not None:
            row.append(f"{at_cost(beside, p.cost):.4f}")
        cells.append(row)
    widths = [max(len(row[c]) for row in cells) for c in range(len(head))]
    lines = [f"\n{title}"]
    for row in cells:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def report(chat: ChatSet) -> str:
    every = load_chat(chat.path)
    stand_ins = [s for _, s, _ in chat.families]
    # a prompt some stand-in was not judged on is left out of every curve alike
    items = [
        item
        for item in every
        if isinstance(item["judged"], dict)
        and all(item["judged"].get(s) is not None for s in stand_ins)
    ]
    truth = np.asarray(
        [[float(item["judged"][s]) for s in stand_ins] for item in items]  # type: ignore[index]
    )
    scores = shipped_scores(items)
    out = [
        f"\n== {chat.name}: {len(items)} prompts (of {len(every)}; "
        f"{len(every) - len(items)} lack a stand-in's judgment), held out by source; "
        f"quality = {chat.quality}",
        "stand-ins: " + ", ".join(f"{family} <- {judged}" for family, judged, _ in chat.families),
    ]
    singles = [
        summarise(chat, f"always {name}", np.full(len(items), f, dtype=np.int64), truth)
        for f, (name, _, _) in enumerate(chat.families)
    ]
    best = truth >= truth.max(axis=1, keepdims=True)
    singles.append(
        summarise(
            chat, "oracle: cheapest at the prompt's best\u2020", np.argmax(best, axis=1), truth
        )
    )
    two_tier = two_tier_curve(chat, scores, truth)
    out.append(render(chat, "single models", singles, None))
    out.append(render(chat, "two-tier (score vs threshold)", two_tier, None))
    heads = held_out_predictions(chat, items, scores)
    out.append(
        render(
            chat,
            "multi-model, cheapest above target (held-out heads)",
            multi_curve(chat, heads, truth),
            two_tier,
        )
    )
    base = held_out_predictions(chat, items, scores, base_rates_only=True)
    out.append(
        render(
            chat,
            "multi-model, base rates only (slopes 0)",
            multi_curve(chat, base, truth),
            two_tier,
        )
    )
    return "\n".join(out)


def main() -> int:
    for chat in CHAT_SETS:
        print(report(chat))
    print("\u2020 not a router: knows every judgment on the prompt (an upper bound).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
