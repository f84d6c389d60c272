"""Training and judging the learned scorer: the n-gram logistic regression
(training/ngram_v1.py trains the shipped file with it, `gateway route train` a
tenant's own) and the routing-quality maths (APGR, the strong share at 95% of strong
quality, a bootstrap interval).

Needs numpy, which the serving path never imports: only training/, research/ and
`gateway route train` load this module (`pip install 'gateway[train]'` where
numpy is missing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gateway.routing.learned.quality import QualityHead
from gateway.routing.learned.text_features import FeatureSpec, featurize
from gateway.training.calibration import threshold_for_share
from gateway.training.labelled import FOLD_SEED, FOLDS, HOLDOUT_FOLD, LabelledPrompt

SPEC = FeatureSpec()
# a quality head's ridge on its slope (per prompt, on the mean loss): keeps a model whose
# quality the score does not explain at its base rate instead of fitting noise
SLOPE_L2 = 1e-3
NEWTON_STEPS = 50
BOOTSTRAP = 1000
BOOTSTRAP_SEED = 29


@dataclass(frozen=True)
class Hyper:
    l2: float = 3e-5
    steps: int = 300
    learning_rate: float = 0.05
    # weight of each benchmark's rows relative to a uniform share (MMLU has 14k rows,
    # MT-Bench 72: without it the model learns MMLU alone)
    balance: float = 1.0
    # the target: "gain" = 0.5 + 0.5 * clip((strong - weak) / scale, -1, 1), so a prompt
    # the weak model wins ranks below a tie and a big MT-Bench grade gap counts more than a
    # small one (APGR sums the gaps); "binary" = strong strictly better (ngram-v1, shipped)
    label: str = "binary"
    # MT-Bench gaps are grades / 10 (mostly 0.05-0.5): their own scale
    mt_gain_scale: float = 0.15


HYPER = Hyper()


def target(row: LabelledPrompt, hyper: Hyper = HYPER) -> float:
    """The training label of one row, in [0, 1]."""
    gain = row.strong - row.weak
    if hyper.label == "binary":
        return 1.0 if gain > 0 else 0.0
    scale = hyper.mt_gain_scale if row.benchmark == "mt_bench" else 1.0
    return 0.5 + 0.5 * max(-1.0, min(1.0, gain / scale))


@dataclass(frozen=True)
class Design:
    """A CSR matrix of features (rows x buckets) built once and reused by every fold."""

    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]

    @classmethod
    def build(cls, rows: Sequence[LabelledPrompt], spec: FeatureSpec) -> Design:
        indptr = [0]
        indices: list[int] = []
        values: list[float] = []
        for row in rows:
            features = featurize(row.prompt, spec)
            indices.extend(features)
            values.extend(features.values())
            indptr.append(len(indices))
        return cls(
            np.asarray(indptr, dtype=np.int64),
            np.asarray(indices, dtype=np.int64),
            np.asarray(values, dtype=np.float64),
        )

    def subset(self, picks: npt.NDArray[np.int64]) -> Design:
        starts, ends = self.indptr[picks], self.indptr[picks + 1]
        lengths = ends - starts
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Design(indptr, self.indices[take], self.values[take])

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1


def fit(
    design: Design,
    labels: npt.NDArray[np.float64],
    sample_weights: npt.NDArray[np.float64],
    tasks: npt.NDArray[np.int64],
    buckets: int,
    hyper: Hyper = HYPER,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32]]:
    """Weighted L2-regularised logistic regression by full-batch Adam: deterministic for
    the same inputs (no sampling; numpy's reductions are ordered).

    Each task (benchmark) gets its own unregularised intercept: it absorbs how often the
    strong model is needed on that benchmark as a whole, so the n-gram weights learn what
    makes one prompt harder than another *within* a task instead of learning to recognise
    which benchmark a prompt came from (live traffic is none of them). The shipped bias
    is the mean of the task intercepts.

    Only the buckets some row uses are fitted (the others' gradient is always 0, so Adam
    leaves them at 0): the same weights, found in time that grows with the rows instead
    of the 2^20 buckets (50 labels: seconds to milliseconds)."""
    used, compact = np.unique(design.indices, return_inverse=True)
    full = buckets
    design = Design(design.indptr, compact.astype(np.int64), design.values)
    buckets = len(used)
    row_of = np.repeat(np.arange(design.rows), np.diff(design.indptr))
    task_count = int(tasks.max()) + 1
    w = np.zeros(buckets)
    b = np.zeros(task_count)
    m_w, v_w = np.zeros(buckets), np.zeros(buckets)
    m_b, v_b = np.zeros(task_count), np.zeros(task_count)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    total = sample_weights.sum()
    for step in range(1, hyper.steps + 1):
        contributions = w[design.indices] * design.values
        logits = np.bincount(row_of, weights=contributions, minlength=design.rows)
        p = 1.0 / (1.0 + np.exp(-(logits + b[tasks])))
        residual = (p - labels) * sample_weights / total
        grad_w = (
            np.bincount(design.indices, weights=residual[row_of] * design.values, minlength=buckets)
            + hyper.l2 * w
        )
        grad_b = np.bincount(tasks, weights=residual, minlength=task_count)
        m_w = beta1 * m_w + (1 - beta1) * grad_w
        v_w = beta2 * v_w + (1 - beta2) * grad_w * grad_w
        m_b = beta1 * m_b + (1 - beta1) * grad_b
        v_b = beta2 * v_b + (1 - beta2) * grad_b * grad_b
        correction1, correction2 = 1 - beta1**step, 1 - beta2**step
        w -= hyper.learning_rate * (m_w / correction1) / (np.sqrt(v_w / correction2) + eps)
        b -= hyper.learning_rate * (m_b / correction1) / (np.sqrt(v_b / correction2) + eps)
    weights = np.zeros(full)
    weights[used] = w
    return b, weights.astype(np.float32)


def balanced_weights(
    rows: Sequence[LabelledPrompt],
    balance: float = 1.0,
    group: Callable[[LabelledPrompt], str] = lambda row: row.benchmark,
) -> npt.NDArray[np.float64]:
    """Row weights under which every group (benchmark, by default) weighs the same in all
    at balance 1, whatever its row count (0: every row the same)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[group(row)] = counts.get(group(row), 0) + 1
    share = len(rows) / len(counts)
    return np.asarray([(share / counts[group(r)]) ** balance for r in rows])


def train_on(
    rows: Sequence[LabelledPrompt],
    design: Design,
    picks: npt.NDArray[np.int64],
    spec: FeatureSpec = SPEC,
    hyper: Hyper = HYPER,
) -> tuple[float, npt.NDArray[np.float32]]:
    chosen = [rows[i] for i in picks]
    labels = np.asarray([target(r, hyper) for r in chosen])
    weights = balanced_weights(chosen, hyper.balance)
    names = sorted({r.benchmark for r in chosen})
    tasks = np.asarray([names.index(r.benchmark) for r in chosen], dtype=np.int64)
    biases, w = fit(design.subset(picks), labels, weights, tasks, spec.buckets, hyper)
    return float(biases.mean()), w


def weights_header(
    trained_on: str | list[str], label: str, training_rows: int, hyper: Hyper = HYPER
) -> dict[str, object]:
    """What a weights file says of its training: `gateway route calibrate` reads the
    folds, and a reader the rest."""
    return {
        "trained_on": trained_on,
        "label": label,
        "bias_is": "the mean of the per-benchmark intercepts (fixed effects)",
        "folds": FOLDS,
        "holdout_fold": HOLDOUT_FOLD,
        "fold_seed": FOLD_SEED,
        "hyper": {
            "l2": hyper.l2,
            "steps": hyper.steps,
            "learning_rate": hyper.learning_rate,
            "balance": hyper.balance,
        },
        "training_rows": training_rows,
    }


def logits_of(
    design: Design, picks: npt.NDArray[np.int64], bias: float, weights: npt.NDArray[np.float32]
) -> npt.NDArray[np.float64]:
    """The linear model's logit on each picked row."""
    held = design.subset(picks)
    row_of = np.repeat(np.arange(held.rows), np.diff(held.indptr))
    contributions = weights[held.indices].astype(np.float64) * held.values
    logits = np.bincount(row_of, weights=contributions, minlength=held.rows) + bias
    return np.asarray(logits, dtype=np.float64)


def out_of_fold_logits(
    rows: Sequence[LabelledPrompt],
    design: Design,
    folds: npt.NDArray[np.int64],
    scored: npt.NDArray[np.bool_],
    hyper: Hyper = HYPER,
) -> npt.NDArray[np.float64]:
    """Each `scored` row's logit from a model trained on every row of the other folds
    (`folds[i]` is row i's fold; unscored rows only ever train); 0 for the rest."""
    logits = np.zeros(len(rows))
    for k in range(FOLDS):
        train = np.flatnonzero(folds != k).astype(np.int64)
        test = np.flatnonzero(scored & (folds == k)).astype(np.int64)
        if len(test) == 0:
            continue
        bias, weights = train_on(rows, design, train, hyper=hyper)
        logits[test] = logits_of(design, test, bias, weights)
    return logits


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
    if not values:
        # every resample had no strong-over-weak gain to recover: no interval
        return float("nan"), float("nan")
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


@dataclass(frozen=True)
class Evidence:
    """How well one router's scores rank prompts: APGR with its bootstrap 95% interval,
    and the strong share needed to reach 95% of always-strong quality (None: never)."""

    apgr: float
    low: float
    high: float
    strong_at_95: float | None

    def cell(self) -> str:
        at = "never" if self.strong_at_95 is None else f"{100 * self.strong_at_95:.1f}%"
        return f"{self.apgr:.3f} ({self.low:.3f}-{self.high:.3f}) {at}"


def evidence(
    scores: npt.NDArray[np.float64],
    strong: npt.NDArray[np.float64],
    weak: npt.NDArray[np.float64],
) -> Evidence:
    low, high = bootstrap_interval(scores, strong - weak)
    return Evidence(apgr(scores, strong - weak), low, high, strong_share_at(scores, strong, weak))


def score_logits(scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    clipped = np.clip(scores, 1e-6, 1 - 1e-6)
    return np.asarray(np.log(clipped / (1 - clipped)), dtype=np.float64)


def fit_head(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> QualityHead:
    """Logistic regression of y (0-1, ties 0.5) on x with an intercept; Newton steps."""
    design = np.stack([np.ones_like(x), x], axis=1)
    ridge = np.diag([0.0, SLOPE_L2])
    rate = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
    beta = np.array([np.log(rate / (1 - rate)), 0.0])
    n = len(y)
    for _ in range(NEWTON_STEPS):
        p = 1 / (1 + np.exp(-(design @ beta)))
        gradient = design.T @ (p - y) / n + ridge @ beta
        hessian = (design.T * (p * (1 - p))) @ design / n + ridge
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    return QualityHead(bias=float(beta[0]), slope=float(beta[1]))


# -- the word table: a ridge head on the mean of static word vectors -----------------

WORD_PENALTY = 1.0


@dataclass(frozen=True)
class WordHead:
    """A ridge regression of a difficulty target on a prompt's mean word vector."""

    beta: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]
    centre: float

    def predict(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.asarray(self.centre + (x - self.mean) @ self.beta)

    def table(
        self,
        words: Sequence[str],
        vectors: npt.NDArray[np.float64],
        trained_on: npt.NDArray[np.float64],
    ) -> tuple[float, dict[str, float]]:
        """The head folded into a scorer's bias and one number a word (weights.py): logit
        = k * (prediction - its median on `trained_on`), k = 1 / its spread there, so
        scores spread over 0-1 and calibration places the threshold. The bias is what a
        prompt with no known word scores: the prediction at the training prompts' mean
        vector, i.e. their mean target (not the zero vector, which no prompt has), so the
        scorer neither sends nor spares a prompt it cannot read on a guess."""
        predicted = self.predict(trained_on)
        k = 1.0 / max(float(predicted.std()), 1e-12)
        bias = k * (self.centre - float(np.median(predicted)))
        values = k * (vectors @ self.beta - float(self.mean @ self.beta))
        return bias, {word: float(v) for word, v in zip(words, values, strict=True)}


def mean_word_vectors(
    ids: Sequence[Sequence[int]],
    vectors: npt.NDArray[np.float64],
    allowed: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.float64]:
    """Each prompt's mean over its words' vectors (`ids` index `vectors`), skipping words
    not `allowed` (those a table trained without them would not hold); zero if none."""
    out = np.zeros((len(ids), vectors.shape[1]))
    for i, word_ids in enumerate(ids):
        kept = [w for w in word_ids if allowed is None or allowed[w]]
        if kept:
            out[i] = vectors[kept].mean(0)
    return out


def fit_word_head(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    weights: npt.NDArray[np.float64],
    penalty: float = WORD_PENALTY,
) -> WordHead:
    mean = np.average(x, axis=0, weights=weights)
    centre = float(np.average(y, weights=weights))
    xc = x - mean
    gram = xc.T @ (xc * weights[:, None]) + penalty * np.eye(x.shape[1])
    beta = np.linalg.solve(gram, xc.T @ (weights * (y - centre)))
    return WordHead(beta=np.asarray(beta, dtype=np.float64), mean=mean, centre=centre)


@dataclass(frozen=True)
class WordClassifier:
    """A logistic regression on a prompt's mean word vector: logit = bias + x . coef.
    Linear in the mean, so it folds into a word table exactly like a WordHead, and a
    prompt with no known word (the zero vector in training) scores the bias alone."""

    bias: float
    coef: npt.NDArray[np.float64]

    def logit(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.asarray(self.bias + x @ self.coef)

    def table(
        self, words: Sequence[str], vectors: npt.NDArray[np.float64]
    ) -> tuple[float, dict[str, float]]:
        values = vectors @ self.coef
        return self.bias, {word: float(v) for word, v in zip(words, values, strict=True)}


def fit_word_classifier(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    weights: npt.NDArray[np.float64],
    penalty: float = 1.0,
    steps: int = 25,
) -> WordClassifier:
    """Weighted ridge logistic regression by Newton steps, on standardised columns (the
    penalty treats every dimension alike), returned on the raw scale."""
    mean, scale = x.mean(0), x.std(0) + 1e-9
    design = np.c_[np.ones(len(x)), (x - mean) / scale]
    beta = np.zeros(design.shape[1])
    ridge = penalty * np.eye(design.shape[1])
    ridge[0, 0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-design @ beta))
        gradient = design.T @ (weights * (p - y)) + ridge @ beta
        hessian = design.T @ (design * (weights * p * (1 - p))[:, None]) + ridge
        beta -= np.linalg.solve(hessian, gradient)
    coef = beta[1:] / scale
    return WordClassifier(bias=float(beta[0] - mean @ coef), coef=np.asarray(coef))


# -- a threshold that keeps a quality target at the interval's lower bound -----------

# the n-gram trainer's target on a tenant's judged labels: how much better the reference
# did, graded (a large gap counts more than a small one, a tie sits in the middle, a
# served-model win below it), never reduced to "strictly better"
GRADED = Hyper(label="gain")


@dataclass(frozen=True)
class TargetThreshold:
    """Where to cut a ranking so the routed mix keeps `target` of always-reference quality
    even at the low end of its bootstrap 95% interval: prompts scoring at or above
    `threshold` go to the reference (the strong tier), the rest to the served model."""

    target: float
    threshold: float
    strong_share: float
    # routed quality / always-reference quality on these labels, with its interval
    ratio: float
    low: float
    high: float
    labels: int


@dataclass(frozen=True)
class RatioCurve:
    """The quality ratio (routed / always-reference) when the `cut` highest-scoring
    prompts go to the reference, for every cut between different scores, with its
    bootstrap 95% interval (resampling prompts)."""

    cuts: list[int]
    ratio: npt.NDArray[np.float64]
    low: npt.NDArray[np.float64]
    high: npt.NDArray[np.float64]


def ratio_curve(
    scores: npt.NDArray[np.float64],
    strong: npt.NDArray[np.float64],
    weak: npt.NDArray[np.float64],
    resamples: int = BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
) -> RatioCurve:
    """Indexed by cut (0..n): one pass of cumulative sums per resample."""
    n = len(scores)
    if n == 0:
        raise ValueError("no labels to calibrate on")
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    gain = (strong - weak)[order]
    rng = np.random.default_rng(seed)
    counts = np.stack(
        [np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(resamples)]
    ).astype(np.float64)
    reference = counts @ strong[order]
    routed = (counts @ weak[order])[:, None] + np.concatenate(
        [np.zeros((resamples, 1)), np.cumsum(counts * gain, axis=1)], axis=1
    )
    usable = reference > 0
    point = (weak.sum() + np.concatenate([[0.0], np.cumsum(gain)])) / max(strong.sum(), 1e-12)
    if usable.any():
        ratios = routed[usable] / reference[usable][:, None]
        low, high = np.percentile(ratios, [2.5, 97.5], axis=0)
    else:  # the reference scored 0 on every resample: no ratio to bound
        low = high = np.full(n + 1, np.nan)
    cuts = [0, *(k for k in range(1, n + 1) if k == n or ranked[k - 1] != ranked[k])]
    return RatioCurve(cuts, point, np.asarray(low), np.asarray(high))


def threshold_for_target(
    scores: npt.NDArray[np.float64],
    strong: npt.NDArray[np.float64],
    weak: npt.NDArray[np.float64],
    target: float,
    resamples: int = BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
) -> TargetThreshold:
    """The fewest reference calls whose quality ratio's bootstrap lower bound reaches
    `target` (every call to the reference, ratio 1, when nothing less does). Pure: the
    same inputs give the same threshold. Cuts fall only between different scores, so
    tied prompts go one way, as a threshold sends them."""
    curve = ratio_curve(scores, strong, weak, resamples, seed)
    n = len(scores)
    chosen = next((k for k in curve.cuts if curve.low[k] >= target - 1e-12), n)
    return TargetThreshold(
        target=target,
        threshold=threshold_for_share([float(s) for s in scores], chosen / n),
        strong_share=chosen / n,
        ratio=float(curve.ratio[chosen]),
        low=float(curve.low[chosen]),
        high=float(curve.high[chosen]),
        labels=n,
    )


def sigmoid_of(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A linear scorer's output (what `Scorer.score` returns) from its logits."""
    return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float64)
