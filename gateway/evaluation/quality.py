"""Measured quality from stored labels: per route x served model x request kind, the
judged quality ratio against the route's reference with its 95% interval, and what the
served answers saved against sending every request to the reference.

The ratio is a ratio of means, R = mean(served quality) / mean(reference quality), over a
group's judged labels. Its interval is the delta method (Taylor linearisation, the
textbook variance of a ratio estimator): with d_i = s_i - R r_i,

    SE(R) = sqrt( sum d_i^2 / (n (n - 1)) ) / mean(r)

and R +- t(0.975, n-1) SE(R), the low end clamped at 0. It is deterministic (no
resampling), needs only sums, and is sound when n is not tiny and mean(r) is well away
from 0; with fewer than 2 labels the interval is [0, inf). A judged pair's two shares add
up to 1, so R = p / (1 - p) for p the served answers' mean share: 1.0 means "as good as
the reference on this traffic".

Savings are a Horvitz-Thompson estimate: each judged label stands for 1 / sample_rate
answered requests, and saved = sum over labels of (reference cost - served cost) /
sample_rate. The reference's cost is what its answer to the same conversation cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import msgspec

from gateway.evaluation.labels import JUDGED, Label
from gateway.routing.measured import ALL_KINDS, MeasuredQuality

# two-sided 95% Student t quantiles by degrees of freedom (1-30); 1.96 beyond 120
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(degrees: int) -> float:
    if degrees <= len(_T95):
        return _T95[degrees - 1]
    return 2.0 if degrees <= 60 else 1.98 if degrees <= 120 else 1.96


def ratio_interval(
    served: Sequence[float], reference: Sequence[float]
) -> tuple[float, float, float]:
    """(ratio of means, low, high) of paired qualities, by the delta method above."""
    n = len(served)
    total_reference = sum(reference)
    if n == 0:
        return math.nan, 0.0, math.inf
    if total_reference <= 0:
        return math.inf, 0.0, math.inf
    ratio = sum(served) / total_reference
    if n < 2:
        return ratio, 0.0, math.inf
    mean_reference = total_reference / n
    squares = sum((s - ratio * r) ** 2 for s, r in zip(served, reference, strict=True))
    error = math.sqrt(squares / (n * (n - 1))) / mean_reference
    half = t95(n - 1) * error
    return ratio, max(0.0, ratio - half), ratio + half


@dataclass(frozen=True)
class QualityRow:
    """One group's measured quality with what it cost and saved."""

    quality: MeasuredQuality
    reference_model: str
    evaluation_usd: Decimal
    # estimated over all answered requests (each label weighted by 1 / sample_rate)
    served_usd: Decimal
    reference_usd: Decimal

    @property
    def saved_usd(self) -> Decimal:
        return self.reference_usd - self.served_usd

    def as_json(self) -> dict[str, object]:
        q = self.quality
        return {
            "route": q.route,
            "model": q.model,
            "kind": q.kind,
            "reference": self.reference_model,
            "ratio": _finite(q.ratio),
            "low": _finite(q.low),
            "high": _finite(q.high),
            "samples": q.samples,
            "evaluation_usd": str(self.evaluation_usd),
            "estimated_served_usd": str(self.served_usd),
            "estimated_reference_usd": str(self.reference_usd),
            "estimated_saved_usd": str(self.saved_usd),
        }


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def _usd(text: str) -> Decimal:
    try:
        return Decimal(text) if text else Decimal(0)
    except ArithmeticError:
        return Decimal(0)


def _row(route: str, model: str, kind: str, labels: list[Label]) -> QualityRow:
    served = [label.served_quality for label in labels]
    reference = [label.reference_quality or 0.0 for label in labels]
    ratio, low, high = ratio_interval(served, reference)
    weight = [Decimal(1) / Decimal(str(label.sample_rate or 1.0)) for label in labels]
    return QualityRow(
        MeasuredQuality(route, model, kind, ratio, low, high, len(labels)),
        reference_model=labels[0].reference_model if labels else "",
        evaluation_usd=sum((_usd(label.evaluation_cost_usd) for label in labels), Decimal(0)),
        served_usd=sum(
            (_usd(_served_cost(label)) * w for label, w in zip(labels, weight, strict=True)),
            Decimal(0),
        ),
        reference_usd=sum(
            (_usd(label.reference_cost_usd) * w for label, w in zip(labels, weight, strict=True)),
            Decimal(0),
        ),
    )


def _served_cost(label: Label) -> str:
    """What the client's answer cost: a shadow label's client got the reference's."""
    return label.reference_cost_usd if label.shadow else label.served_cost_usd


def _delivered(label: Label) -> Label:
    """The label as the client got it: a shadow label's client got the reference's
    answer, a tie with itself that saved nothing."""
    if not label.shadow:
        return label
    return msgspec.structs.replace(
        label,
        served_model=label.reference_model,
        served_quality=0.5,
        reference_quality=0.5,
        served_cost_usd=label.reference_cost_usd,
        shadow=False,
    )


def quality_rows(labels: Iterable[Label], *, route: str | None = None) -> list[QualityRow]:
    """Judged labels grouped per route x served model x kind, plus each route x model
    over every kind (kind `all`) and each route over every model (model `all`, kind
    `all`: the route's headline), sorted by route, model, kind. A shadow label measures
    its candidate like a served one (its quality counts the same; it saved nothing) and
    counts in the route's headline as what the client got: the reference's answer."""
    groups: dict[tuple[str, str, str], list[Label]] = {}
    for label in labels:
        if label.metric != JUDGED or label.reference_quality is None:
            continue
        if route is not None and label.route != route:
            continue
        for key in (
            (label.route, label.served_model, label.kind),
            (label.route, label.served_model, ALL_KINDS),
        ):
            groups.setdefault(key, []).append(label)
        groups.setdefault((label.route, ALL_KINDS, ALL_KINDS), []).append(_delivered(label))
    return [_row(*key, groups[key]) for key in sorted(groups)]


def measured(labels: Iterable[Label]) -> list[MeasuredQuality]:
    """Every group's MeasuredQuality (the contract routing reads)."""
    return [row.quality for row in quality_rows(labels)]


@dataclass(frozen=True)
class FeedbackRow:
    route: str
    model: str
    metric: str
    mean: float
    samples: int

    def as_json(self) -> dict[str, object]:
        return {
            "route": self.route,
            "model": self.model,
            "metric": self.metric,
            "mean": round(self.mean, 6),
            "samples": self.samples,
        }


def feedback_rows(labels: Iterable[Label]) -> list[FeedbackRow]:
    """The application's feedback per route x served model x metric (values 0-1)."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for label in labels:
        if label.source == "feedback":
            groups.setdefault((label.route, label.served_model, label.metric), []).append(
                label.served_quality
            )
    return [
        FeedbackRow(*key, sum(values) / len(values), len(values))
        for key, values in sorted(groups.items())
    ]


def headline(row: QualityRow | None, reference: str) -> str:
    """The console's first line for a route: what it saved, at what measured quality."""
    if row is None or row.quality.samples == 0:
        return f"unmeasured: no judged labels yet against always-{reference or 'the reference'}"
    q = row.quality
    ratio = "n/a" if not math.isfinite(q.ratio) else f"{q.ratio:.0%}"
    high = "inf" if not math.isfinite(q.high) else f"{q.high:.0%}"
    saved = row.saved_usd
    amount = f"{saved:.2f}" if abs(saved) >= 1 else f"{saved:.4f}"
    return (
        f"saved ${amount} against always-{row.reference_model} at measured quality"
        f" {ratio} [{q.low:.0%}, {high}] ({q.samples} judged)"
    )
