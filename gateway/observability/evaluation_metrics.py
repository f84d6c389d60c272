"""Online evaluation's metrics (a part of :class:`GatewayMetrics`, on the same registry
or multiprocess files): the queue and what it dropped, labels stored, evaluation spend,
and the measured quality per route x served model x request kind, refreshed from the
labels store (every worker reads the same store, so the gauges agree)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal

from prometheus_client import CollectorRegistry, Counter, Gauge

QUALITY_LABELS = ("route", "model", "kind", "reference")


class EvaluationMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.enqueued_total = Counter(
            "gateway_evaluation_enqueued_total",
            "Answered requests sampled and queued for evaluation.",
            registry=registry,
        )
        self.dropped_total = Counter(
            "gateway_evaluation_dropped_total",
            "Sampled requests not evaluated, by reason (queue_full, daily_cap, "
            "already_labelled, reference_error, shadow_error, judge_error, no_verdict, "
            "unreadable_answer, shutdown, attempts, journal_trimmed, journal_error, ...).",
            ("reason",),
            registry=registry,
        )
        self.reclaimed_total = Counter(
            "gateway_evaluation_reclaimed_total",
            "Evaluation jobs a stopped process left unfinished, claimed from the journal "
            "and queued here.",
            registry=registry,
        )
        self.labels_total = Counter(
            "gateway_evaluation_labels_total",
            "Labels stored, by source (judge, feedback).",
            ("source",),
            registry=registry,
        )
        self.spend_total = Counter(
            "gateway_evaluation_spend_usd_total",
            "USD spent on reference and judge calls (also in the ledger, kind evaluation).",
            registry=registry,
        )
        self.queue_depth = Gauge(
            "gateway_evaluation_queue_depth",
            "Sampled requests waiting for evaluation in this process.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.quality_ratio = Gauge(
            "gateway_evaluation_quality_ratio",
            "Measured quality: judged quality of the served answers / the reference's, over "
            "the recent labels (kind `all`: every kind; model `all`: the whole route).",
            QUALITY_LABELS,
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.quality_low = Gauge(
            "gateway_evaluation_quality_ratio_low",
            "The 95% interval's lower bound of gateway_evaluation_quality_ratio.",
            QUALITY_LABELS,
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.quality_high = Gauge(
            "gateway_evaluation_quality_ratio_high",
            "The 95% interval's upper bound of gateway_evaluation_quality_ratio (+Inf with "
            "fewer than 2 labels).",
            QUALITY_LABELS,
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.samples = Gauge(
            "gateway_evaluation_samples",
            "Judged labels behind gateway_evaluation_quality_ratio.",
            QUALITY_LABELS,
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.group_spend = Gauge(
            "gateway_evaluation_group_spend_usd",
            "What evaluating the labels behind gateway_evaluation_quality_ratio cost.",
            QUALITY_LABELS,
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.saved = Gauge(
            "gateway_evaluation_saved_usd",
            "Estimated USD saved against sending the same traffic to the reference "
            "(each label weighted by 1 / sample rate).",
            QUALITY_LABELS,
            registry=registry,
            multiprocess_mode="livemax",
        )

    # the evaluator's events (gateway.evaluation.evaluator.EvaluationEvents)
    def enqueued(self) -> None:
        self.enqueued_total.inc()

    def dropped(self, reason: str) -> None:
        self.dropped_total.labels(reason).inc()

    def reclaimed(self) -> None:
        self.reclaimed_total.inc()

    def labelled(self, source: str) -> None:
        self.labels_total.labels(source).inc()

    def spent(self, tenant: str, usd: Decimal) -> None:
        self.spend_total.inc(float(usd))

    def queue_depth_now(self, depth: int) -> None:
        self.queue_depth.set(depth)

    def measured(
        self,
        rows: Iterable[tuple[str, str, str, str, float, float, float, int, Decimal, Decimal]],
    ) -> None:
        """(route, model, kind, reference, ratio, low, high, samples, spend, saved) rows."""
        for route, model, kind, reference, ratio, low, high, samples, spend, saved in rows:
            labels = (route, model, kind, reference)
            self.quality_ratio.labels(*labels).set(ratio if not math.isnan(ratio) else 0.0)
            self.quality_low.labels(*labels).set(low)
            self.quality_high.labels(*labels).set(high)
            self.samples.labels(*labels).set(samples)
            self.group_spend.labels(*labels).set(float(spend))
            self.saved.labels(*labels).set(float(saved))
