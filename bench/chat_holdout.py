"""Chat rows of bench/routing_quality.py: does a router rank open-ended chat prompts it
was never trained on, held out by *source*?

    .venv/bin/python bench/chat_holdout.py        # the chat table alone (~4 min, 6 models)

Chat sources: AlpacaEval's five collections (helpful_base, koala, oasst, selfinstruct,
vicuna; data/routing/alpaca_eval.jsonl, labels = a GPT-4-Turbo judge's pairwise verdict
between GPT-4-1106 and Mixtral-8x7B) and MT-Bench (data/routing/mt_bench.jsonl, GPT-4
grades of the same two models). For each source, the learned scorer is trained, with
the shipped recipe (bench/train_router.py), on every other row of the shipped data
(MMLU, GSM8K, MT-Bench, the other AlpacaEval sources) and scores the left-out source only:
leave-one-source-out, so neither the prompts nor the place they were collected were
seen. Beside it: random, prompt length, and a ceiling that is not a router: "knows the
other models" ranks each AlpacaEval prompt by how often ten *other* judged models lost to
GPT-4-Turbo on it (the per-prompt difficulty a perfect chat scorer could learn).

APGR is given with a 95% bootstrap interval (prompts resampled with replacement within
the held-out source, scores fixed); "strong @95%" is the fewest strong calls whose mix
reaches 95% of always-strong quality. The pooled row puts the five AlpacaEval sources'
out-of-source scores together (one label scale); MT-Bench's grades are another scale,
so it stays a row of its own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.prompt_shape import ShapeHead, shape_matrix
from bench.train_router import BENCHMARKS, DATA_DIR, SPEC, Design, train_on
from gateway.routing.learned.labelled import LabelledPrompt, parse_lines

CHAT_FILE = "alpaca_eval"
CHAT_SOURCES = ("helpful_base", "koala", "oasst", "selfinstruct", "vicuna", "mt_bench")
BOOTSTRAP = 1000
BOOTSTRAP_SEED = 29
# the ceiling leaves out the pair's own weak model and the other GPT-4
CEILING_EXCLUDES = ("Mixtral-8x7B-Instruct-v0.1", "gpt4")


@dataclass(frozen=True)
class ChatRow:
    source: str
    router: str
    prompts: int
    apgr: float
    low: float
    high: float
    strong_at_95: float | None


def load_chat_training(data_dir: Path = DATA_DIR) -> list[LabelledPrompt]:
    """Every shipped labelled prompt: the three benchmarks, then the AlpacaEval rows."""
    rows: list[LabelledPrompt] = []
    for name in (*BENCHMARKS, CHAT_FILE):
        path = data_dir / f"{name}.jsonl"
        rows += parse_lines(path.read_text(encoding="utf-8").splitlines(), str(path))
    return rows


def other_models_difficulty(
    data_dir: Path = DATA_DIR, excludes: tuple[str, ...] = CEILING_EXCLUDES
) -> dict[str, float]:
    """AlpacaEval prompt id -> the share of the other judged models that lost to the
    reference on it (ties count half)."""
    out: dict[str, float] = {}
    path = data_dir / f"{CHAT_FILE}.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        wins = [
            float(v)
            for model, v in item["judged"].items()
            if model not in excludes and v is not None
        ]
        out[item["id"]] = 1.0 - sum(wins) / len(wins)
    return out


def apgr(scores: npt.NDArray[np.float64], gain: npt.NDArray[np.float64]) -> float:
    """Area under PGR over strong shares 0..1, ties broken in expectation."""
    n = len(scores)
    order = np.argsort(-scores, kind="stable")
    ranked, gains = scores[order], gain[order]
    # each prompt's gain replaced by its tie group's mean: the expected curve
    _, starts, sizes = np.unique(-ranked, return_index=True, return_counts=True)
    means = np.add.reduceat(gains, starts) / sizes
    smoothed = np.repeat(means, sizes)
    cumulative = np.concatenate([[0.0], np.cumsum(smoothed)])
    total = gains.sum()
    if total <= 0:
        return float("nan")
    return float(np.trapezoid(cumulative / total, np.arange(n + 1) / n))


def strong_share_at(
    scores: npt.NDArray[np.float64],
    strong: npt.NDArray[np.float64],
    weak: npt.NDArray[np.float64],
    of_strong: float = 0.95,
) -> float | None:
    n = len(scores)
    order = np.argsort(-scores, kind="stable")
    ranked, gains = scores[order], (strong - weak)[order]
    _, starts, sizes = np.unique(-ranked, return_index=True, return_counts=True)
    smoothed = np.repeat(np.add.reduceat(gains, starts) / sizes, sizes)
    quality = (weak.sum() + np.concatenate([[0.0], np.cumsum(smoothed)])) / n
    reached = np.flatnonzero(quality >= of_strong * strong.mean() - 1e-12)
    return float(reached[0] / n) if len(reached) else None


def bootstrap_interval(
    scores: npt.NDArray[np.float64], gain: npt.NDArray[np.float64]
) -> tuple[float, float]:
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    values = []
    for _ in range(BOOTSTRAP):
        pick = rng.integers(0, len(scores), len(scores))
        value = apgr(scores[pick], gain[pick])
        if not np.isnan(value):
            values.append(value)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def leave_one_source_out(rows: Sequence[LabelledPrompt]) -> dict[str, npt.NDArray[np.float64]]:
    """Source -> the learned scores of its prompts from a model trained on every other
    row (the prompts in row order)."""
    design = Design.build(rows, SPEC)
    origins = np.asarray([r.origin for r in rows])
    out: dict[str, npt.NDArray[np.float64]] = {}
    for source in CHAT_SOURCES:
        train = np.flatnonzero(origins != source).astype(np.int64)
        test = np.flatnonzero(origins == source).astype(np.int64)
        bias, weights = train_on(rows, design, train)
        held = design.subset(test)
        row_of = np.repeat(np.arange(held.rows), np.diff(held.indptr))
        contributions = weights[held.indices].astype(np.float64) * held.values
        logits = np.bincount(row_of, weights=contributions, minlength=held.rows) + bias
        out[source] = 1.0 / (1.0 + np.exp(-logits))
    return out


def shape_training(
    rows: Sequence[LabelledPrompt],
) -> tuple[list[LabelledPrompt], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The prompt-shape head's training set: the AlpacaEval rows, their shape features
    and their target, the share of the cheaper judged models (every judged model but the
    other GPT-4) that lost on each prompt."""
    lost = other_models_difficulty(excludes=("gpt4",))
    chat = [r for r in rows if r.benchmark == CHAT_FILE]
    target = np.asarray([lost[r.id] for r in chat])
    return chat, shape_matrix([r.prompt for r in chat]), target


def prompt_shape_scores(rows: Sequence[LabelledPrompt]) -> dict[str, npt.NDArray[np.float64]]:
    """Source -> the prompt-shape head's scores of its prompts (bench/prompt_shape.py),
    trained on the AlpacaEval collections other than the source; MT-Bench's from a head
    trained on all five."""
    chat, x, target = shape_training(rows)
    origins = np.asarray([r.origin for r in chat])
    out: dict[str, npt.NDArray[np.float64]] = {}
    for source in CHAT_SOURCES:
        if source == "mt_bench":
            head = ShapeHead().fit(x, target)
            mt = [r.prompt for r in rows if r.origin == "mt_bench"]
            out[source] = head.logits(shape_matrix(mt))
        else:
            head = ShapeHead().fit(x[origins != source], target[origins != source])
            out[source] = head.logits(x[origins == source])
    return out


def chat_table(rows: Sequence[LabelledPrompt]) -> list[ChatRow]:
    learned = leave_one_source_out(rows)
    shaped = prompt_shape_scores(rows)
    difficulty = other_models_difficulty()
    table: list[ChatRow] = []
    pooled: dict[str, list[npt.NDArray[np.float64]]] = {}
    pooled_labels: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = []
    for source in (*CHAT_SOURCES, "alpaca_eval (5 sources pooled)"):
        if source in CHAT_SOURCES:
            mine = [r for r in rows if r.origin == source]
            strong = np.asarray([r.strong for r in mine])
            weak = np.asarray([r.weak for r in mine])
            routers = {
                "random": np.zeros(len(mine)),
                "prompt-length": np.asarray([float(len(r.prompt)) for r in mine]),
                "short prompts first": np.asarray([-float(len(r.prompt)) for r in mine]),
                "learned (left out)": learned[source],
                "prompt shape (left out)\u2021": shaped[source],
            }
            if source != "mt_bench":
                routers["ceiling: knows the other models\u2020"] = np.asarray(
                    [difficulty[r.id] for r in mine]
                )
                pooled_labels.append((strong, weak))
                for name, s in routers.items():
                    pooled.setdefault(name, []).append(s)
        else:
            strong = np.concatenate([s for s, _ in pooled_labels])
            weak = np.concatenate([w for _, w in pooled_labels])
            routers = {name: np.concatenate(parts) for name, parts in pooled.items()}
        gain = strong - weak
        for name, scores in routers.items():
            low, high = bootstrap_interval(scores, gain)
            table.append(
                ChatRow(
                    source,
                    name,
                    len(scores),
                    apgr(scores, gain),
                    low,
                    high,
                    strong_share_at(scores, strong, weak),
                )
            )
    return table


def render_chat(table: Sequence[ChatRow]) -> str:
    head = ["held-out source", "router", "prompts", "APGR", "95% interval", "strong @95%"]
    cells = [head]
    for r in table:
        cells.append(
            [
                r.source,
                r.router,
                str(r.prompts),
                f"{r.apgr:.3f}",
                f"{r.low:.3f}-{r.high:.3f}",
                "not reached" if r.strong_at_95 is None else f"{r.strong_at_95:.1%}",
            ]
        )
    widths = [max(len(row[c]) for row in cells) for c in range(len(head))]
    lines = ["\nchat, leave-one-source-out (trained on every other source)"]
    for row in cells:
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    lines.append(
        "\u2020 not a router: ranks by how ten other judged models did on the very prompt"
        " (an upper bound on what a per-prompt difficulty scorer could learn)."
    )
    lines.append(
        "\u2021 bench/prompt_shape.py, not shipped: 16 hand-picked shape features chosen after"
        " looking at these five collections, so its interval is optimistic; MT-Bench is its"
        " only unseen check."
    )
    return "\n".join(lines)


def main() -> int:
    print(render_chat(chat_table(load_chat_training())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
