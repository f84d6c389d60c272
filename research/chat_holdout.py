"""Chat rows of research/routing_quality.py: does a router rank open-ended chat prompts
from a source it was never trained on?

    .venv/bin/python research/chat_holdout.py  # the chat table alone (~4 min, quiet machine)

Chat sources, three judges (data/routing/README.md):

- AlpacaEval's five collections (helpful_base, koala, oasst, selfinstruct, vicuna): a
  GPT-4-Turbo judge's pairwise verdict between GPT-4-1106 and Mixtral-8x7B;
- MT-Bench: GPT-4 grades of the same two models;
- OA (oa_qlora): OpenAssistant conversations, GPT-4's pairwise verdict between GPT-4 and
  GPT-3.5-Turbo over both answer orders (70% of them not in English);
- HelloBench's five tasks (open-ended QA, summarization, chat, text completion,
  heuristic generation): a GPT-4o checklist score of GPT-4o and Llama-3.1-8B.

For each source, every router is trained on every *other* row of the shipped data and
scores the left-out source only: leave-one-source-out, so the prompts and the place they
were collected were not seen. The judge usually was: a held-out AlpacaEval collection or
HelloBench task trains beside its siblings, judged alike, and OA's GPT-4 judge also
graded MT-Bench, which is always in training. About 231 OA rows continue conversations
that AlpacaEval's oasst collection starts (other turns, other text). Rows:

- random, prompt length, short prompts first;
- the shipped scorer as it ships (trained on MMLU, GSM8K and MT-Bench: MT-Bench's row
  is in its training data, so not held out);
- learned (left out): the shipped recipe (training/ngram_v1.py) on every other row;
- trained on its own set (5-fold): what a tenant gets by labelling their own traffic:
  the shipped recipe on the benchmarks plus the *same set's* other folds (grouped folds:
  an OA conversation's follow-ups stay in one fold). Not held out by source;
- a ceiling that is not a router, where a set judged many models: "knows the other
  models" ranks each prompt by how often the set's *other* cheaper judged models did
  worse than its strong model on it.

APGR is given with a 95% bootstrap interval (prompts resampled with replacement within
the row's prompts, scores fixed); "strong @95%" is the fewest strong calls whose mix
reaches 95% of always-strong quality. Pooled rows put a set's sources' out-of-source
scores together (one judge, one label scale); sets are never pooled with each other.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.routing.learned.weights import load_scorer
from gateway.training.fitting import (
    SPEC,
    Design,
    apgr,
    bootstrap_interval,
    logits_of,
    strong_share_at,
    train_on,
)
from gateway.training.labelled import FOLDS, SHIPPED_BENCHMARKS, LabelledPrompt, fold_of
from training.chat_data import (
    CHAT_FILES,
    CHAT_SETS,
    CHAT_SOURCES,
    load_chat_training,
    other_models_difficulty,
)

# the ceiling also leaves out the pair's own weak model
CEILING_EXCLUDES = {"alpaca_eval": ("Mixtral-8x7B-Instruct-v0.1",), "hellobench": ("llama31_8b",)}
SHIPPED_SCORER = "ngram-v1"


@dataclass(frozen=True)
class ChatRow:
    source: str
    router: str
    prompts: int
    apgr: float
    low: float
    high: float
    strong_at_95: float | None


def leave_one_source_out(
    rows: Sequence[LabelledPrompt], design: Design | None = None
) -> dict[str, npt.NDArray[np.float64]]:
    """Source -> the learned scores of its prompts from a model trained on every other
    row (the prompts in row order)."""
    design = design or Design.build(rows, SPEC)
    origins = np.asarray([r.origin for r in rows])
    out: dict[str, npt.NDArray[np.float64]] = {}
    for source in CHAT_SOURCES:
        train = np.flatnonzero(origins != source).astype(np.int64)
        test = np.flatnonzero(origins == source).astype(np.int64)
        bias, weights = train_on(rows, design, train)
        out[source] = 1.0 / (1.0 + np.exp(-logits_of(design, test, bias, weights)))
    return out


def trained_on_own_set(
    rows: Sequence[LabelledPrompt], design: Design | None = None
) -> dict[str, npt.NDArray[np.float64]]:
    """Source -> out-of-fold scores from the shipped recipe trained on the benchmarks
    plus the other folds of the source's own set (the tenant who labels their traffic);
    MT-Bench, a benchmark, is in every model already, so it has no row here."""
    design = design or Design.build(rows, SPEC)
    benchmark = np.asarray([r.benchmark for r in rows])
    origins = np.asarray([r.origin for r in rows])
    folds = np.asarray([fold_of(r) for r in rows])
    base = np.isin(benchmark, SHIPPED_BENCHMARKS)
    scores = np.full(len(rows), np.nan)
    for name in CHAT_FILES:
        mine = benchmark == name
        for k in range(FOLDS):
            train = np.flatnonzero((base & (folds != k)) | (mine & (folds != k)))
            test = np.flatnonzero(mine & (folds == k)).astype(np.int64)
            bias, weights = train_on(rows, design, train.astype(np.int64))
            scores[test] = 1.0 / (1.0 + np.exp(-logits_of(design, test, bias, weights)))
    return {
        source: scores[origins == source]
        for source in CHAT_SOURCES
        if not np.isnan(scores[origins == source]).any()
    }


SHIPPED = "shipped ngram-v1 (as is)"
LEARNED = "learned (left out)"
OWN = "trained on its own set (5-fold)\u00a7"
CEILING = "ceiling: knows the other models\u2020"


def chat_table(
    rows: Sequence[LabelledPrompt], extra: dict[str, npt.NDArray[np.float64]] | None = None
) -> list[ChatRow]:
    """Every router's rows; `extra` adds routers scored elsewhere (label -> a score for
    each of `rows`, held out by source the same way; NaN on a source it has no row for)."""
    design = Design.build(rows, SPEC)
    learned = leave_one_source_out(rows, design)
    own = trained_on_own_set(rows, design)
    shipped = load_scorer(SHIPPED_SCORER)
    ceilings = {
        name: other_models_difficulty(name, excludes=CEILING_EXCLUDES[name])
        for name in CEILING_EXCLUDES
    }
    table: list[ChatRow] = []
    for name, sources in CHAT_SETS.items():
        pooled: dict[str, list[npt.NDArray[np.float64]]] = {}
        pooled_labels: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = []
        for source in sources:
            picked = [i for i, r in enumerate(rows) if r.origin == source]
            mine = [rows[i] for i in picked]
            strong = np.asarray([r.strong for r in mine])
            weak = np.asarray([r.weak for r in mine])
            routers = {
                "random": np.zeros(len(mine)),
                "prompt-length": np.asarray([float(len(r.prompt)) for r in mine]),
                "short prompts first": np.asarray([-float(len(r.prompt)) for r in mine]),
                SHIPPED: np.asarray(shipped.score_many([r.prompt for r in mine])),
                LEARNED: learned[source],
            }
            for label, scores in (extra or {}).items():
                if not np.isnan(scores[picked]).any():
                    routers[label] = scores[picked]
            if source in own:
                routers[OWN] = own[source]
            if name in ceilings:
                routers[CEILING] = np.asarray([ceilings[name][r.id] for r in mine])
            table += _rows(source, routers, strong, weak)
            pooled_labels.append((strong, weak))
            for router, scores in routers.items():
                pooled.setdefault(router, []).append(scores)
        if len(sources) > 1:
            strong = np.concatenate([s for s, _ in pooled_labels])
            weak = np.concatenate([w for _, w in pooled_labels])
            routers = {
                router: np.concatenate(parts)
                for router, parts in pooled.items()
                if len(parts) == len(sources)
            }
            table += _rows(f"{name} ({len(sources)} sources pooled)", routers, strong, weak)
    return table


def _rows(
    source: str,
    routers: dict[str, npt.NDArray[np.float64]],
    strong: npt.NDArray[np.float64],
    weak: npt.NDArray[np.float64],
) -> list[ChatRow]:
    gain = strong - weak
    out = []
    for router, scores in routers.items():
        low, high = bootstrap_interval(scores, gain)
        out.append(
            ChatRow(
                source,
                router,
                len(scores),
                apgr(scores, gain),
                low,
                high,
                strong_share_at(scores, strong, weak),
            )
        )
    return out


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
        "\u2020 not a router: ranks by how the set's other cheaper judged models did on the very"
        " prompt (an upper bound on what a per-prompt difficulty scorer could learn)."
    )
    lines.append(
        "\u00a7 not held out by source: the shipped recipe on the benchmarks plus the other"
        " folds of the same set, as `gateway route train` does with a tenant's labels."
    )
    return "\n".join(lines)


def main() -> int:
    print(render_chat(chat_table(load_chat_training())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
